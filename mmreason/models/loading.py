"""Load a policy (and its processor) from any ``from_pretrained`` directory.

Attention implementation and dtype are chosen for the hardware unless the config says otherwise:
flash_attention_2 when it imports on a CUDA GPU of compute capability 8.0 or newer (Ampere), else PyTorch SDPA;
bf16 on a CUDA GPU with native bf16 (Ampere or newer), else fp32.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch

from mmreason.models.families import check_checkpoint
from mmreason.models.hub import resolve_model_dir

if TYPE_CHECKING:
    from transformers import ProcessorMixin

log = logging.getLogger(__name__)

# The closed sets of ``model.dtype`` / ``model.attn_implementation`` (and eval's --model_args of those names).
DType = Literal["auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16"]  # auto: bf16 where CUDA has it
AttnImplementation = Literal["auto", "flash_attention_2", "sdpa", "eager"]

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


@dataclass
class ModelConfig:
    """How to load the policy. Every field has its default here; configs override by name."""

    name_or_path: str = "tiny-model"  # a checkpoint directory (e.g. Qwen2.5-VL-3B-Instruct) or a run dir
    dtype: DType = "auto"
    master_weights: bool = True  # bf16 / fp16 weights: the optimizer steps fp32 copies (docs/training.md)
    attn_implementation: AttnImplementation = "auto"  # auto: flash_attention_2 on Ampere+ when it imports, else sdpa
    gradient_checkpointing: bool = False
    freeze_vision_tower: bool = False
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    lora_include_vision: bool = False  # LoRA on the vision tower too (off by default, as in most VLM recipes)
    adapter: str | None = None  # a saved LoRA adapter to load on top of the base model

    RANGES: ClassVar[dict[str, str]] = {"lora_r": "[1, inf)", "lora_alpha": "[1, inf)", "lora_dropout": "[0, 1)"}


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":  # native bf16 only: torch emulates it before Ampere (V100, T4), slowly
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False):
            return torch.bfloat16
        return torch.float32
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"model.dtype: unknown dtype {name!r}; valid: auto, {', '.join(_DTYPES)}") from None


def resolve_attn_implementation(name: str, dtype: torch.dtype | None = None) -> str:
    """flash_attention_2 on CUDA when flash-attn imports and the weights are bf16/fp16 (``dtype``, default
    the ``auto`` dtype), else sdpa; an explicit name is kept."""
    if name != "auto":
        if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
            raise ValueError(
                "model.attn_implementation=flash_attention_2 but flash-attn is not installed "
                "(pip install 'mmreason[gpu]'), or use sdpa"
            )
        return name
    if not torch.cuda.is_available():
        return "sdpa"
    dtype = dtype if dtype is not None else resolve_dtype("auto")
    if torch.cuda.get_device_capability() < (8, 0):
        log.info("flash-attn 2 needs compute capability 8.0 (Ampere) or newer: using SDPA attention")
    elif importlib.util.find_spec("flash_attn") is None:
        log.info("flash-attn not installed: using SDPA attention")
    elif dtype not in (torch.bfloat16, torch.float16):
        log.info("flash-attn needs bf16 or fp16 weights; %s uses SDPA attention", dtype)
    else:
        return "flash_attention_2"
    return "sdpa"


def cpu_attention(attn: str, dtype: torch.dtype) -> str:
    """``sdpa_fp32`` (models/cpu_attention.py: SDPA's arithmetic in fp32) for a bf16 / fp16 model with SDPA
    attention on a machine without CUDA, where the CPU's bf16 attention kernel is the slower one; else ``attn``."""
    if attn != "sdpa" or dtype not in (torch.bfloat16, torch.float16) or torch.cuda.is_available():
        return attn
    # Imported on first use, not at the top: importing it registers sdpa_fp32 with transformers.
    from mmreason.models import cpu_attention as registered

    return registered.NAME


def backend_note(attn_implementation: str, dtype: torch.dtype | None = None, generation: str = "hf") -> str:
    """One line saying which attention, dtype and generation backend a run uses, for the run header."""
    flash = importlib.util.find_spec("flash_attn") is not None
    parts = [f"attention: {attn_implementation}" + ("" if flash else " (flash-attn not installed)")]
    if dtype is not None:
        parts.append(f"dtype: {str(dtype).removeprefix('torch.')}")
    parts.append(
        "generation: vLLM (rollout.backend=vllm)"
        if generation == "vllm"
        else "generation: HF generate (vLLM: rollout.backend=vllm)"
    )
    return "; ".join(parts)


def check_model_dir(path: str | Path) -> Path:
    """The checkpoint directory of ``path`` (a hub id resolves through ``hub.resolve_model_dir``, as in
    ``mmreason eval``), or a clear error for one that cannot hold a checkpoint, before transformers tries."""
    p = resolve_model_dir(path)
    if not p.exists():
        raise FileNotFoundError(f"model directory {str(p)!r} does not exist (build one with `mmreason tiny-model DIR`)")
    if p.is_dir() and not (p / "config.json").exists() and not (p / "adapter_config.json").exists():
        raise FileNotFoundError(f"model directory {str(p)!r} has no config.json: not a checkpoint")
    return p


def load_processor(path: str | Path, min_pixels: int | None = None, max_pixels: int | None = None) -> ProcessorMixin:
    """The checkpoint's processor; ``min_pixels`` / ``max_pixels`` override its per-image pixel limits."""
    from transformers import AutoProcessor  # heavy (seconds): imported on use, not when a config loads

    path = check_model_dir(path)
    try:
        processor = AutoProcessor.from_pretrained(str(path))
    except Exception as exc:  # transformers raises many types; the user needs the path and the reason
        raise ValueError(f"cannot load a processor from {str(path)!r}: {exc}") from exc
    family = check_checkpoint(path, processor)  # a known family, processor patch / merge sizes as the model's
    # pixel limits steer the processor of a pixel-budget family; a tile family's tiles keep their size
    if (min_pixels is not None or max_pixels is not None) and (family is None or family.budget == "pixels"):
        images = processor.image_processor
        limits = {"shortest_edge": images.size["shortest_edge"], "longest_edge": images.size["longest_edge"]}
        if min_pixels is not None:
            limits["shortest_edge"] = min_pixels
        if max_pixels is not None:
            limits["longest_edge"] = max_pixels
            if min_pixels is None:  # a max below the processor's own minimum means "at most this much"
                limits["shortest_edge"] = min(limits["shortest_edge"], max_pixels)
        if limits["shortest_edge"] > limits["longest_edge"]:
            raise ValueError(f"min_pixels {limits['shortest_edge']} > max_pixels {limits['longest_edge']}")
        images.size = limits  # pixel counts, not edges (transformers 5 stores the limits here)
    processor.tokenizer.padding_side = "left"  # generation appends on the right
    return processor


def reset_position_state(model: torch.nn.Module) -> None:
    """Forget the M-RoPE offsets (``rope_deltas``) a Qwen-VL forward or generate left on the model: the next
    call computes positions for its own prompts (stale ones give wrong positions or a batch-size mismatch)."""
    inner = getattr(model, "get_base_model", lambda: model)()
    backbone = getattr(inner, "model", None)
    if backbone is not None and hasattr(backbone, "rope_deltas"):
        backbone.rope_deltas = None


def vision_tower(model: torch.nn.Module) -> torch.nn.Module | None:
    inner = getattr(model, "model", model)
    return getattr(inner, "visual", None)


def load_model(cfg: ModelConfig, *, trainable: bool = True) -> torch.nn.Module:
    """The policy as ``cfg`` asks: dtype, attention, frozen vision tower, LoRA, gradient checkpointing."""
    from transformers import AutoModelForImageTextToText  # heavy: imported on use, not when a config loads

    path = check_model_dir(cfg.name_or_path)
    check_checkpoint(path)  # a family with no adapter fails here, in one line
    dtype = resolve_dtype(cfg.dtype)
    attn = cpu_attention(resolve_attn_implementation(cfg.attn_implementation, dtype), dtype)
    try:
        # an HF model, then perhaps its peft wrapper: what each supports is asked with hasattr below
        model: Any = AutoModelForImageTextToText.from_pretrained(str(path), dtype=dtype, attn_implementation=attn)
    except Exception as exc:
        raise ValueError(f"cannot load a model from {str(path)!r}: {exc}") from exc
    if cfg.adapter:
        from peft import PeftModel  # heavy: imported only for an adapter

        model = PeftModel.from_pretrained(model, cfg.adapter, is_trainable=trainable and cfg.lora)
        if not cfg.lora:
            model = model.merge_and_unload()
    elif cfg.lora and trainable:
        model = apply_lora(model, cfg)
    if cfg.freeze_vision_tower:
        tower = vision_tower(model.get_base_model() if hasattr(model, "get_base_model") else model)
        if tower is not None:
            tower.requires_grad_(False)
    if cfg.gradient_checkpointing and trainable:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 (the old name is an alias)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    if not trainable:
        model.requires_grad_(False).eval()
    return model


def apply_lora(model: torch.nn.Module, cfg: ModelConfig) -> torch.nn.Module:
    """Wrap with peft LoRA on the language model's projections; the vision tower is left out by default."""
    from peft import LoraConfig, get_peft_model  # heavy: imported only for LoRA

    targets: list[str] | str = list(cfg.lora_target_modules)
    if not cfg.lora_include_vision:
        # A regex on full module names: match the target projections outside `visual`.
        alternatives = "|".join(targets)
        targets = rf"^(?!.*\bvisual\b).*\.({alternatives})$"
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def trainable_parameters(model: torch.nn.Module) -> tuple[int, int]:
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, total
