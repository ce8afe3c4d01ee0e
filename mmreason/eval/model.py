"""``--model``: a checkpoint directory, a LoRA adapter, a training run directory, or a hub id.

A run directory from `mmreason train` (``config.yaml`` + ``checkpoint-<step>/model/``) resolves to its
newest complete checkpoint. A checkpoint that holds a LoRA adapter (``adapter_config.json``) is loaded
on the base model named by the run's ``config.yaml`` (``model.name_or_path``), or by the adapter's own
``base_model_name_or_path`` when no run config is found, and merged for generation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmreason.eval.config import ModelArgs
from mmreason.models.hub import is_hub_id, resolve_model_dir
from mmreason.models.loading import ModelConfig, load_model, load_processor
from mmreason.paths import checkpoints

if TYPE_CHECKING:
    import torch
    from transformers import ProcessorMixin

_PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "tokenizer_config.json")


@dataclass
class ResolvedModel:
    """Where the weights, adapter and processor of ``--model`` live."""

    spec: str  # what the user gave
    name: str  # the output folder name (lmms-eval's sanitized model name)
    weights: Path  # a from_pretrained directory (the base model when there is an adapter)
    processor_dir: Path
    adapter: Path | None = None
    checkpoint: Path | None = None  # the checkpoint chosen in a run directory

    def describe(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "weights": str(self.weights.resolve()),
            "processor": str(self.processor_dir.resolve()),
            "adapter": str(self.adapter.resolve()) if self.adapter else None,
            "checkpoint": str(self.checkpoint.resolve()) if self.checkpoint else None,
        }


def sanitize(text: str) -> str:
    """lmms-eval's model-name sanitizer: path separators and shell-hostile characters become ``__``."""
    name = re.sub(r"[\"<>:/|\\?*\[\]]+", "__", text.strip().rstrip("/").removeprefix("./"))
    return re.sub(r"^\.+", lambda m: "_" * len(m.group()), name)  # "..", "." never name a folder above


def resolve_model(spec: str, adapter: str | None = None) -> ResolvedModel:
    """Resolve ``--model`` (and ``model_args.adapter``) to directories; errors name the path."""
    path = Path(spec)
    checkpoint = None
    if not path.exists():
        path = _from_hub(spec)
    if (path / "config.yaml").is_file() and not (path / "config.json").exists():
        checkpoint = _latest_checkpoint(path)
        path = checkpoint / "model"
    elif (path / "model").is_dir() and not (path / "config.json").exists():
        checkpoint, path = path, path / "model"
    if (path / "adapter_config.json").is_file():
        base = _adapter_base(path)
        found = ResolvedModel(spec, "", base, path if _has_processor(path) else base, path, checkpoint)
    elif (path / "config.json").is_file():
        found = ResolvedModel(spec, "", path, path, None, checkpoint)
    else:
        raise FileNotFoundError(
            f"--model {spec!r}: {str(path)!r} is neither a model directory (config.json), a LoRA adapter "
            "(adapter_config.json) nor a training run directory (config.yaml + checkpoint-<step>/)"
        )
    if adapter:
        if found.adapter is not None:
            raise ValueError(
                f"--model {spec!r} is already a LoRA adapter; model_args.adapter={adapter!r} would stack a second one"
            )
        if not (Path(adapter) / "adapter_config.json").is_file():
            raise FileNotFoundError(f"model_args.adapter {adapter!r} has no adapter_config.json")
        found.adapter = Path(adapter)
    found.name = sanitize(spec) + (f"__{checkpoint.name}" if checkpoint and checkpoint != Path(spec) else "")
    if adapter:
        found.name += "__" + sanitize(Path(adapter).name)
    return found


def _from_hub(spec: str) -> Path:
    if not is_hub_id(spec):
        raise FileNotFoundError(f"--model {spec!r} does not exist")
    return resolve_model_dir(spec, key="--model")


def _latest_checkpoint(run_dir: Path) -> Path:
    found = checkpoints(run_dir)
    if not found:
        raise FileNotFoundError(
            f"--model {str(run_dir)!r}: training run directory has no complete checkpoint-<step>/ yet"
        )
    return found[-1]


def _adapter_base(adapter_dir: Path) -> Path:
    """The base model of a LoRA adapter: the training run's config, else the adapter's own record."""
    import yaml

    for run_dir in (adapter_dir.parent.parent, adapter_dir.parent):
        config = run_dir / "config.yaml"
        if config.is_file():
            name = (yaml.safe_load(config.read_text()) or {}).get("model", {}).get("name_or_path")
            if name:
                return _existing(name, run_dir, adapter_dir)
    recorded = json.loads((adapter_dir / "adapter_config.json").read_text()).get("base_model_name_or_path")
    if not recorded:
        raise FileNotFoundError(
            f"LoRA adapter {str(adapter_dir)!r}: no run config.yaml and no "
            "base_model_name_or_path to find its base model"
        )
    return _existing(recorded, adapter_dir, adapter_dir)


def _existing(name: str, relative_to: Path, adapter_dir: Path) -> Path:
    for candidate in (Path(name), relative_to / name):
        if candidate.exists():
            return candidate
    if is_hub_id(name):
        return _from_hub(name)
    raise FileNotFoundError(f"LoRA adapter {str(adapter_dir)!r}: its base model {name!r} does not exist")


def _has_processor(path: Path) -> bool:
    return any((path / f).is_file() for f in _PROCESSOR_FILES)


def load_for_eval(
    resolved: ResolvedModel, args: ModelArgs, device: str, *, with_model: bool = True
) -> tuple[torch.nn.Module | None, ProcessorMixin]:
    """(model in eval mode on ``device``, processor with left padding); ``with_model=False``: (None, processor),
    for a colocated vLLM engine that loads the weights itself."""

    cfg = ModelConfig(
        name_or_path=str(resolved.weights),
        dtype=args.dtype,
        attn_implementation=args.attn_implementation,
        adapter=str(resolved.adapter) if resolved.adapter else None,
    )
    processor = load_processor(resolved.processor_dir, args.min_pixels, args.max_pixels)
    if not with_model:
        return None, processor
    try:
        model = load_model(cfg, trainable=False)
    except ValueError:
        raise  # load_model's own errors already name the directory
    except Exception as exc:  # peft / safetensors errors on a broken adapter name no path
        raise ValueError(
            f"cannot load the model of --model {resolved.spec!r} ({resolved.adapter or resolved.weights}): {exc}"
        ) from exc
    return model.to(device), processor


def default_device(device: str | None) -> str:
    import torch

    return device or ("cuda" if torch.cuda.is_available() else "cpu")
