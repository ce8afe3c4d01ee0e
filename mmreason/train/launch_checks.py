"""Start-up checks of how a run was launched, before the Accelerator is made and before the model loads.

``accelerate launch --config_file X`` hands its config to the processes as environment variables
(``ACCELERATE_USE_DEEPSPEED``, ``ACCELERATE_MIXED_PRECISION``, ``FSDP_TRANSFORMER_CLS_TO_WRAP`` ...), which the
``Accelerator`` reads when it is made. ``check_launch`` reads the same variables first:

- DeepSpeed is refused: no test runs it (the trainer never hands ``prepare`` a dataloader, steps the engine
  once per mini-batch, and has no ZeRO-3 gathering); FSDP2 (``configs/accelerate/fsdp.yaml``) shards instead.
- bf16 (``model.dtype`` or accelerate's ``mixed_precision``) and flash-attention 2 are refused on a GPU older
  than Ampere (compute capability below 8.0): torch emulates bf16 there (``torch.cuda.is_bf16_supported()`` is
  true on a V100 / T4) and flash-attn 2 has no kernels for it.
- FSDP's unit classes come from the model family (``ModelFamily.fsdp_units``) when the accelerate config names
  none, or names classes that are not the family's (the shipped ``fsdp.yaml`` names Qwen2.5-VL's): the
  corrected list goes back into ``FSDP_TRANSFORMER_CLS_TO_WRAP``, read by accelerate's FSDP plugin on a GPU
  and by ``parallel.sharding.wrap_classes`` on the CPU.
"""

from __future__ import annotations

import json
import os

from mmreason.config import ConfigError
from mmreason.models.families import check_checkpoint
from mmreason.models.loading import check_model_dir
from mmreason.train.config import TrainConfig

FSDP_YAML = "configs/accelerate/fsdp.yaml"
AMPERE = (8, 0)


def check_launch(cfg: TrainConfig) -> None:
    """Refuse a launch the trainer cannot run, in one line naming the setting and what to use instead;
    set the FSDP unit classes of the model's family when the launcher's do not fit the model."""
    if _env_true("ACCELERATE_USE_DEEPSPEED"):
        raise ConfigError(
            "distributed_type: DEEPSPEED (accelerate config): DeepSpeed is not supported; shard with FSDP2 "
            f"instead (accelerate launch --config_file {FSDP_YAML})"
        )
    why = pre_ampere_refusal(
        cuda_capability(),
        dtype=cfg.model.dtype,
        mixed_precision=os.environ.get("ACCELERATE_MIXED_PRECISION", "no"),
        attn_implementation=cfg.model.attn_implementation,
    )
    if why:
        raise ConfigError(why)
    note = set_fsdp_units(cfg.model.name_or_path)
    if note and os.environ.get("RANK", "0") == "0":
        print(note)


def _env_true(name: str) -> bool:
    return os.environ.get(name, "false").strip().lower() in ("true", "1", "yes")


def cuda_capability() -> tuple[int, int] | None:
    """Return the compute capability of this process's GPU (``LOCAL_RANK`` among the visible ones), None without
    CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    index = int(os.environ.get("LOCAL_RANK", "0") or 0) % torch.cuda.device_count()
    major, minor = torch.cuda.get_device_capability(index)
    return int(major), int(minor)


def pre_ampere_refusal(
    capability: tuple[int, int] | None, *, dtype: str, mixed_precision: str, attn_implementation: str
) -> str | None:
    """Return the one-line refusal of a setting a GPU of ``capability`` cannot run natively, or None: bf16 weights, bf16
    mixed precision and flash-attention 2 need compute capability 8.0 (Ampere) or newer. ``capability`` None (no CUDA:
    the CPU runs bf16 natively) refuses nothing."""
    if capability is None or tuple(capability) >= AMPERE:
        return None
    gpu = f"this GPU has compute capability {capability[0]}.{capability[1]}, below Ampere's 8.0"
    if dtype in ("bfloat16", "bf16"):
        return f"model.dtype={dtype}: {gpu} and only emulates bf16; use model.dtype=float16 or float32"
    if mixed_precision.strip().lower() == "bf16":
        return (
            f"mixed_precision: bf16 (accelerate config): {gpu} and only emulates bf16; use mixed_precision: fp16 or no"
        )
    if attn_implementation == "flash_attention_2":
        return f"model.attn_implementation=flash_attention_2: {gpu}, which flash-attn 2 does not run; use sdpa"
    return None


def set_fsdp_units(name_or_path: str) -> str | None:
    """Put the model family's unit classes in ``FSDP_TRANSFORMER_CLS_TO_WRAP`` under an FSDP launch with
    transformer-based wrapping, when it is unset or names a class that is not one of them. Return the line saying so
    (None when nothing changed)."""
    if not (_env_true("ACCELERATE_USE_FSDP") and os.environ.get("FSDP_AUTO_WRAP_POLICY") == "TRANSFORMER_BASED_WRAP"):
        return None
    path = check_model_dir(name_or_path)
    # None: a LoRA adapter directory; its base model's classes are unknown here
    family = check_checkpoint(path)
    if family is None:
        return None
    units = family.units_for(json.loads((path / "config.json").read_text()))
    asked = [c.strip() for c in os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "").split(",") if c.strip()]
    if not units or (asked and set(asked) <= set(units)):
        return None
    os.environ["FSDP_TRANSFORMER_CLS_TO_WRAP"] = ",".join(units)
    why = f"names {', '.join(asked)}, not all {family.name}'s" if asked else "is not set"
    return (
        f"fsdp: fsdp_transformer_layer_cls_to_wrap {why}; wrapping {', '.join(units)} "
        f"(the {family.name} family's FSDP units, {family.adapter_file})"
    )
