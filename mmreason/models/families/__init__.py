"""Model families: one adapter file per family, found here by ``config.json``'s ``model_type``.

``family_for(model_type)`` fails loudly for a family with no adapter, naming the supported ones and the
file to add. ``check_checkpoint(path)`` runs at start-up: the family is known and its processor's patch and
merge sizes agree with the model config's (a mismatch would otherwise surface as a feature / token count
mismatch at the first step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import ProcessorMixin

from mmreason.models.families import internvl, qwen2_vl, qwen3_vl
from mmreason.models.families.base import ModelFamily

FAMILIES: tuple[ModelFamily, ...] = (*qwen2_vl.FAMILIES, *qwen3_vl.FAMILIES, *internvl.FAMILIES)
_BY_TYPE = {t: f for f in FAMILIES for t in f.model_types}


def _check_shared_processors() -> None:
    facts: dict[str, tuple] = {}
    for f in FAMILIES:
        for cls in f.processor_classes:
            if facts.setdefault(cls, (f.pixels_per_token, f.video_plan)) != (f.pixels_per_token, f.video_plan):
                raise ValueError(f"model families sharing {cls} disagree on pixels_per_token / video_plan")


_check_shared_processors()


def supported_model_types() -> list[str]:
    return sorted(_BY_TYPE)


def family_for(model_type: str, where: str = "") -> ModelFamily:
    """The adapter of ``model_type``; a one-line ValueError naming the supported ones otherwise."""
    try:
        return _BY_TYPE[model_type]
    except KeyError:
        at = f"{where}: " if where else ""
        raise ValueError(
            f"{at}model family {model_type!r} has no adapter; supported: "
            f"{', '.join(supported_model_types())} (add mmreason/models/families/<family>.py and "
            "register it in mmreason/models/families/__init__.py)"
        ) from None


def family_of_model(model: torch.nn.Module) -> ModelFamily:
    """The adapter of a loaded model (through PEFT / DDP wrappers)."""
    inner = getattr(model, "module", model)
    inner = getattr(inner, "get_base_model", lambda: inner)()
    return family_for(getattr(inner.config, "model_type", ""), type(inner).__name__)


def family_of_processor(processor: ProcessorMixin) -> ModelFamily:
    """The adapter of a loaded processor, by its class, for the prompt builder (which holds only a processor).
    Families that share a processor class (Qwen3-VL and Qwen3.5) agree on what the prompt builder asks:
    ``pixels_per_token`` and ``video_plan`` (``_check_shared_processors`` enforces it at import)."""
    name = type(processor).__name__
    for family in FAMILIES:
        if name in family.processor_classes:
            return family
    raise ValueError(
        f"processor {name} belongs to no model family with an adapter; supported processors: "
        f"{', '.join(c for f in FAMILIES for c in f.processor_classes)} (add "
        "mmreason/models/families/<family>.py and register it in mmreason/models/families/__init__.py)"
    )


def never_sampled_tokens() -> tuple[str, ...]:
    """Every family's never-sampled special tokens (a tokenizer holds those of its own family only)."""
    return tuple(dict.fromkeys(t for f in FAMILIES for t in f.never_sampled))


def turn_end_tokens() -> tuple[str, ...]:
    return tuple(dict.fromkeys(f.turn_end_token for f in FAMILIES))


def _vision_sizes(config: dict) -> tuple[int | None, int | None]:
    vision = config.get("vision_config") or {}
    return vision.get("patch_size"), vision.get("spatial_merge_size")


def check_checkpoint(path: str | Path, processor: ProcessorMixin | None = None) -> ModelFamily | None:
    """The family of the checkpoint at ``path`` (None for a LoRA adapter directory without config.json);
    raises ValueError naming the file when the family is unknown or ``processor``'s patch / merge size
    disagrees with the model config's."""
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        return None
    config = json.loads(config_file.read_text())
    family = family_for(config.get("model_type", ""), str(config_file))
    if processor is None:
        return family
    images = getattr(processor, "image_processor", None)
    if family.budget == "tiles":  # the tile side and the tokens a tile must agree
        vision = config.get("vision_config") or {}
        want = (list(vision.get("image_size") or []), config.get("image_seq_length"))
        size = getattr(images, "size", None) or {}
        got_tiles = ([size.get("height"), size.get("width")], getattr(processor, "image_seq_length", None))
        if want != got_tiles:
            raise ValueError(
                f"{config_file}: the vision config has image_size={want[0]}, image_seq_length={want[1]} "
                f"but the processor has tile size={got_tiles[0]}, image_seq_length={got_tiles[1]}: "
                "visual tokens would not match the model's features"
            )
        return family
    patch, merge = _vision_sizes(config)
    got = (getattr(images, "patch_size", None), getattr(images, "merge_size", None))
    if (patch, merge) != got:
        raise ValueError(
            f"{config_file}: the vision config has patch_size={patch}, spatial_merge_size={merge} "
            f"but the processor (preprocessor_config.json) has patch_size={got[0]}, "
            f"merge_size={got[1]}: visual tokens would not match the model's features"
        )
    return family


__all__ = [
    "FAMILIES",
    "ModelFamily",
    "check_checkpoint",
    "family_for",
    "family_of_model",
    "family_of_processor",
    "never_sampled_tokens",
    "supported_model_types",
    "turn_end_tokens",
]
