"""A LoRA policy's weights as a vLLM adapter: only the adapter goes to the engine, never a merged model.

With ``rollout.vllm_lora: adapter`` (the default) a colocated engine is built with ``enable_lora`` when the
policy is a PEFT LoRA model that vLLM can serve as an adapter (``adapter_plan``): one LoRA adapter, on the
language model only, without bias, DoRA or fully trained modules (``modules_to_save``), on a model class vLLM
runs LoRA for. Every push writes the adapter (``save_pretrained``: a few MB where the merged model is GB) to a
new directory and loads it into the engine under a new id; the rows that follow are sampled with it. Anything
else (``rollout.vllm_lora: merged``, a sharded policy, LoRA on the vision tower, server mode) pushes the merged
weights as before, and says why in one line.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# vLLM 0.32's ``LoRAConfig.max_lora_rank`` takes these values only; the engine gets the smallest >= the rank.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class LoraPlan:
    """The engine's LoRA settings for a policy served as an adapter."""

    max_lora_rank: int


def peft_lora_config(model: Any) -> Any:
    """Return the LoRA config of a PEFT model with one adapter, or None for a model without one."""
    inner = getattr(model, "module", model)
    configs = getattr(inner, "peft_config", None)
    if not configs or not hasattr(inner, "get_base_model"):
        return None
    return next(iter(configs.values())) if len(configs) == 1 else configs


def adapter_plan(model: Any, model_dir: str | Path, *, sharded: bool = False) -> tuple[LoraPlan | None, str]:
    """Return ``(plan, "")`` when ``model``'s LoRA can be served as a vLLM adapter, else ``(None, why not)`` (``why`` is
    empty for a model without LoRA)."""
    config = peft_lora_config(model)
    if config is None:
        return None, ""
    if isinstance(config, dict):
        return None, f"{len(config)} PEFT adapters (one is served)"
    why = _unsupported(config, model, sharded)
    if why:
        return None, why
    if not vllm_supports_lora(model_dir):
        return None, "vLLM runs no LoRA for this model class"
    rank = max([int(config.r), *(int(r) for r in (config.rank_pattern or {}).values())])
    if rank > VLLM_LORA_RANKS[-1]:
        return None, f"rank {rank} is over vLLM's largest ({VLLM_LORA_RANKS[-1]})"
    return LoraPlan(max_lora_rank=min(r for r in VLLM_LORA_RANKS if r >= rank)), ""


def _unsupported(config: Any, model: Any, sharded: bool) -> str:
    if getattr(config, "peft_type", None) is None or str(config.peft_type.value) != "LORA":
        return f"a {config.peft_type} adapter, not LoRA"
    if sharded:
        return "a sharded policy (its adapter is not gathered for the push)"
    if getattr(config, "use_dora", False) or getattr(config, "bias", "none") != "none":
        return "DoRA or LoRA bias"
    if config.modules_to_save:
        return f"fully trained modules ({', '.join(sorted(config.modules_to_save))})"
    outside = [name for name in lora_module_names(model) if ".language_model." not in f".{name}."]
    if outside:
        return f"LoRA outside the language model ({outside[0]}, ...)"
    return ""


def lora_module_names(model: Any) -> list[str]:
    """Return the names of the modules PEFT wrapped with LoRA."""
    inner = getattr(model, "module", model)
    return [name for name, module in inner.named_modules() if hasattr(module, "lora_A") and len(module.lora_A)]


def vllm_supports_lora(model_dir: str | Path) -> bool:
    """Tell whether vLLM's class for the checkpoint's architecture implements LoRA (``SupportsLoRA``)."""
    import json

    from vllm.model_executor.models import ModelRegistry, supports_lora

    archs = json.loads((Path(model_dir) / "config.json").read_text()).get("architectures") or []
    for arch in archs:
        cls = ModelRegistry._try_load_model_cls(arch)  # noqa: SLF001 - vLLM has no public lookup by name
        if cls is not None:
            return bool(supports_lora(cls))
    return False


class AdapterPushes:
    """The adapters pushed to one engine: each push is a new directory and a new id; the previous adapter
    is dropped from the engine and from disk once the new one is loaded."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.count = 0
        # the LoRARequest every generate call carries, None before the first push
        self.request = None

    def write(self, model: Any) -> tuple[int, Path]:
        """Write the policy's adapter as a new directory: ``(its id, the directory)``."""
        inner = getattr(model, "module", model)
        self.count += 1
        out = self.root / f"adapter-{self.count}"
        if out.exists():
            shutil.rmtree(out)
        inner.save_pretrained(str(out), safe_serialization=True)
        return self.count, out

    def loaded(self, request: Any, engine: Any) -> None:
        """Note that ``request`` is in the engine: it serves every generate call from now; the previous one goes."""
        previous, self.request = self.request, request
        if previous is not None:
            engine.remove_lora(previous.lora_int_id)
            shutil.rmtree(previous.lora_path, ignore_errors=True)
