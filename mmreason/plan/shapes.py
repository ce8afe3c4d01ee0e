"""A model's sizes from its ``config.json`` alone (no weights, no torch): what ``mmreason plan`` computes with.

``ModelShape`` holds the sizes that set a run's memory: the text decoder's width, depth, MLP width, attention
and key/value heads, vocabulary and whether the LM head is tied to the embeddings; the vision tower's width,
depth and MLP width. Its parameter counts are written out module by module for the Qwen2-VL and Qwen2.5-VL
layouts (``tests/plan`` checks them against transformers' own count on the meta device). Qwen3-VL's dense text
decoder has the same layer layout (no q/k/v biases, q/k norms: a rounding difference) and its vision tower is
counted with Qwen2-VL's block (LayerNorm, two-matrix MLP) plus its position table and deepstack mergers.

``PUBLISHED`` holds the published ``config.json`` sizes of the Qwen2.5-VL Instruct checkpoints on the Hugging
Face hub, so a hub id plans without a download: text sizes as each config.json states them (7B: 3584 wide,
28 layers, 18,944 MLP, 28 heads, 4 KV heads, 152,064 tokens; 72B: 8192, 80, 29,568, 64, 8, 152,064; 32B: 5120,
64, 27,648, 40, 8, 152,064; 3B: 2048, 36, 11,008, 16, 2, 151,936, tied head), vision tower 1280 wide, 32
blocks, 16 heads, MLP 3420 (3B, 7B) or 3456 (32B, 72B). Their counts come to 3.75 B, 8.29 B, 33.45 B and
73.41 B parameters, the sizes the hub lists (tests/plan).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen-VL checkpoint that set the memory of a run (``from_config``)."""

    family: str  # config.json's model_type
    vocab: int
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_head: bool
    vision_hidden: int
    vision_depth: int
    vision_intermediate: int
    vision_out: int  # the merger's output width (the text width)
    patch: int = 14  # vision patch side; 2 x 2 patches merge into one visual token
    vision_positions: int = 0  # Qwen3-VL's learned position table
    deepstack: int = 0  # Qwen3-VL's extra mergers

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    def layer_parameters(self) -> int:
        """One decoder layer: q/k/v (biased in Qwen2 layouts), o, the gated MLP, two RMSNorms (and Qwen3's q/k
        norms)."""
        h, q, kv = self.hidden, self.q_width, self.kv_width
        if self.family == "qwen3_vl":
            attention = h * q + 2 * h * kv + q * h + 2 * self.head_dim
        else:
            attention = h * q + q + 2 * (h * kv + kv) + q * h
        return attention + 3 * h * self.intermediate + 2 * h

    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden

    def head_parameters(self) -> int:
        """The LM head's own parameters: 0 when tied to the embeddings."""
        return 0 if self.tied_head else self.vocab * self.hidden

    def text_parameters(self) -> int:
        return (
            self.embedding_parameters() + self.layers * self.layer_parameters() + self.hidden + self.head_parameters()
        )

    def vision_block_parameters(self) -> int:
        """One vision block (Qwen2.5-VL: RMSNorms and a gated MLP; Qwen2-VL, Qwen3-VL: LayerNorms and a
        two-matrix MLP), its qkv and output projections biased."""
        v, i = self.vision_hidden, self.vision_intermediate
        attention = (3 * v * v + 3 * v) + (v * v + v)
        if self.family == "qwen2_5_vl":
            return 2 * v + attention + 2 * (v * i + i) + (i * v + v)
        return 4 * v + attention + (v * i + i) + (i * v + v)

    def vision_parameters(self) -> int:
        """Patch embedding (Qwen3-VL: biased, and a learned position table), blocks, the 2 x 2 patch merger
        (and Qwen3-VL's deepstack mergers)."""
        v, out = self.vision_hidden, self.vision_out
        merge = (4 * v) ** 2 + 4 * v + 4 * v * out + out
        if self.family == "qwen2_5_vl":
            merger, patch = v + merge, 3 * 2 * self.patch**2 * v
        else:
            merger = 2 * v + merge
            patch = 3 * 2 * self.patch**2 * v + (v if self.family == "qwen3_vl" else 0)
        deepstack = self.deepstack * (2 * 4 * v + merge)
        return (
            patch + self.vision_positions * v + self.vision_depth * self.vision_block_parameters() + merger + deepstack
        )

    def root_parameters(self) -> int:
        """What FSDP2's root unit holds: everything outside the decoder layers and vision blocks (embeddings,
        head, final norm, patch embedding, mergers)."""
        blocks = self.layers * self.layer_parameters() + self.vision_depth * self.vision_block_parameters()
        return self.parameters() - blocks

    def parameters(self) -> int:
        return self.text_parameters() + self.vision_parameters()


def _text_fields(config: dict) -> dict:
    """The text decoder's fields: ``text_config`` when the file nests them (transformers >= 4.5x writes it so),
    else the top level (the published Qwen2-VL / Qwen2.5-VL files)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) and "hidden_size" in text else config


def from_config(config: dict, where: str = "config.json") -> ModelShape:
    """The ``ModelShape`` of a parsed ``config.json``; a family the planner does not know, or a missing size, is
    one line naming the file and the key."""
    family = config.get("model_type")
    if family not in FAMILIES:
        raise ValueError(f"{where}: model_type {family!r} is not one the planner sizes; valid: {', '.join(FAMILIES)}")
    text, vision = _text_fields(config), config.get("vision_config") or {}

    def need(fields: dict, key: str, section: str) -> int:
        value = fields.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}: {section}{key} is missing or not a positive integer ({value!r})")
        return value

    hidden, heads = need(text, "hidden_size", ""), need(text, "num_attention_heads", "")
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    if family == "qwen2_vl":  # Qwen2-VL's vision config: embed_dim, mlp_ratio
        v_hidden = need(vision, "embed_dim", "vision_config.")
        v_inter = int(v_hidden * float(vision.get("mlp_ratio", 4)))
    else:
        v_hidden = need(vision, "hidden_size", "vision_config.")
        v_inter = need(vision, "intermediate_size", "vision_config.")
    return ModelShape(
        family=family,
        vocab=need(text, "vocab_size", ""),
        hidden=hidden,
        layers=need(text, "num_hidden_layers", ""),
        intermediate=need(text, "intermediate_size", ""),
        heads=heads,
        kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or hidden // heads),
        tied_head=bool(tied),
        vision_hidden=v_hidden,
        vision_depth=need(vision, "depth", "vision_config."),
        vision_intermediate=v_inter,
        vision_out=int(
            vision.get("out_hidden_size") or (vision.get("hidden_size") if family == "qwen2_vl" else 0) or hidden
        ),
        patch=int(vision.get("patch_size") or 14),
        vision_positions=int(vision.get("num_position_embeddings") or 0) if family == "qwen3_vl" else 0,
        deepstack=len(vision.get("deepstack_visual_indexes") or []) if family == "qwen3_vl" else 0,
    )


def _qwen25(
    vocab: int, hidden: int, layers: int, inter: int, heads: int, *, kv: int, v_inter: int, tied: bool = False
) -> dict[str, Any]:
    """A Qwen2.5-VL config.json's sizes in its published (flat) layout."""
    return {
        "model_type": "qwen2_5_vl",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "tie_word_embeddings": tied,
        "vision_config": {
            "depth": 32,
            "hidden_size": 1280,
            "intermediate_size": v_inter,
            "num_heads": 16,
            "out_hidden_size": hidden,
            "patch_size": 14,
        },
    }


# The published config.json sizes of the hub's Qwen2.5-VL Instruct checkpoints (see the module docstring).
PUBLISHED: dict[str, dict] = {
    "Qwen/Qwen2.5-VL-3B-Instruct": _qwen25(151936, 2048, 36, 11008, 16, kv=2, v_inter=3420, tied=True),
    "Qwen/Qwen2.5-VL-7B-Instruct": _qwen25(152064, 3584, 28, 18944, 28, kv=4, v_inter=3420),
    "Qwen/Qwen2.5-VL-32B-Instruct": _qwen25(152064, 5120, 64, 27648, 40, kv=8, v_inter=3456),
    "Qwen/Qwen2.5-VL-72B-Instruct": _qwen25(152064, 8192, 80, 29568, 64, kv=8, v_inter=3456),
}


def load_shape(name_or_path: str) -> tuple[ModelShape, str]:
    """The shape of ``model.name_or_path`` and where it came from: a local folder's ``config.json`` (a run
    directory's ``final/`` or latest checkpoint is not searched: name the model folder), else a hub id in the
    built-in table. Nothing is downloaded."""
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        path = folder / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"model.name_or_path: {folder} has no config.json")
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a JSON config ({exc})") from None
        if not isinstance(config, dict):
            raise ValueError(f"{path}: not a JSON object")
        return from_config(config, str(path)), str(path)
    if name_or_path in PUBLISHED:
        return from_config(PUBLISHED[name_or_path], name_or_path), f"built-in sizes of {name_or_path}"
    raise ValueError(
        f"model.name_or_path: {name_or_path!r} is neither a local folder with a config.json nor a hub id with "
        f"built-in sizes ({', '.join(PUBLISHED)})"
    )
