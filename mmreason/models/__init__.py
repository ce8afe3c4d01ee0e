"""Model loading and the tiny local VLM."""

from mmreason.models.loading import (
    ModelConfig,
    apply_lora,
    check_model_dir,
    load_model,
    load_processor,
    resolve_attn_implementation,
    resolve_dtype,
    trainable_parameters,
    vision_tower,
)
from mmreason.models.tiny import build_tiny_model

__all__ = [
    "ModelConfig",
    "apply_lora",
    "build_tiny_model",
    "check_model_dir",
    "load_model",
    "load_processor",
    "resolve_attn_implementation",
    "resolve_dtype",
    "trainable_parameters",
    "vision_tower",
]
