"""The shape of a tiny checkpoint (``mmreason tiny-model --size``), shared by ``tiny`` and ``tiny_families``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TinySize:
    vocab_size: int
    text_hidden: int
    text_layers: int
    text_heads: int
    text_kv_heads: int
    text_intermediate: int
    vision_hidden: int
    vision_depth: int
    vision_heads: int
    vision_intermediate: int
    model_vocab: int | None = None  # the model's vocabulary when larger than the tokenizer's (rows never decoded)
    linear_head_dim: int | None = None  # Qwen3.5's linear-attention heads; None: 32 (vLLM's CPU kernel takes 64, 128)
