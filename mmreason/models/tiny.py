"""`mmreason tiny-model`: a real Qwen2.5-VL (or Qwen2-VL) checkpoint with random weights, built offline.

Everything a hub checkpoint has — config, safetensors weights, a byte-level BPE tokenizer with Qwen's
special tokens and chat template, image and video processors — so the whole suite runs through the same
``from_pretrained`` paths a real model uses. Weights and tokenizer are a pure function of the seed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mmreason.models import tiny_families
from mmreason.models.tiny_size import TinySize

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase, ProcessorMixin, Qwen2Tokenizer

ARCHES = ("qwen2_5_vl", "qwen2_vl", *tiny_families.ARCHES)

# Qwen2/Qwen2.5-VL special tokens, in Qwen's order, so ids line up with the real vocabulary's layout.
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
# Added (non-special) tokens of the Qwen2.5 tokenizer that reasoning formats rely on.
ADDED_TOKENS = ["<tool_call>", "</tool_call>"]

_TEMPLATE = Path(__file__).with_name("chat_template.jinja")


SIZES = {
    # ~0.4 M parameters: fast enough for every CPU test. Two 32-wide heads (one KV head): vLLM's CPU
    # attention accepts head sizes 32, 64, 80, ... only, so the tiny model runs on both rollout backends.
    "tiny": TinySize(1024, 64, 2, 2, 1, 128, 32, 2, 2, 64),
    # ~3 M parameters: for short learning experiments on CPU.
    "small": TinySize(2048, 128, 4, 4, 2, 384, 64, 2, 4, 128),
    # ~8 M parameters, head size 64 in text and vision (vLLM's CPU attention takes 32, 64, 80, 96, 112, 128,
    # ...): for experiments where the small model's capacity is the limit; still trains on one CPU core.
    "base": TinySize(2048, 256, 8, 4, 2, 768, 128, 4, 2, 256),
    # ~32 M parameters, of which 29 M are the embeddings and the LM head of Qwen's 151,936-token vocabulary:
    # the shape of a real Qwen-VL update's costs (the head over the vocabulary on every completion token),
    # small enough for one CPU core. The workload of the bf16 and update-profile figures (mmreason/bench).
    "qwen-vocab": TinySize(2048, 96, 8, 3, 1, 1024, 64, 2, 2, 128, model_vocab=151936),
}

# Small pixel limits keep visual sequences short on CPU: 4..64 merged tokens per image, 4..16 per frame.
IMAGE_MIN_PIXELS = 4 * 28 * 28
IMAGE_MAX_PIXELS = 64 * 28 * 28
VIDEO_MIN_PIXELS = 4 * 28 * 28
VIDEO_MAX_PIXELS = 16 * 28 * 28


def _corpus() -> list[str]:
    """Text the tokenizer is trained on: chat scaffolding, reasoning tags and common task words."""
    words = (
        "the a an of to in is are was what which how many much color colour shape number page pages "
        "document video image frame table chart bar answer question evidence reasoning analysis "
        "localization process yes no true false left right top bottom red green blue yellow black white "
        "gray grey orange purple brown circle square triangle rectangle count total sum difference "
        "first second third last before after start end time seconds minute clip crop get_frame "
        "crop_video Text Retriever Image Table None sub-question Sub-question Answer Page Picture Video "
        "The answer is option options A B C D E because therefore so thus step let us look see shows"
    ).split()
    lines = [
        "<think>\n\n</think><answer>yes</answer>",
        "<think>Let us look at the image.</think>\n<answer>B</answer>",
        '<answer>{"evidence_pages": [1, 2], "answer": "42"}</answer>',
        "\\boxed{Question Analysis}\n\\boxed{Evidence Localization}\n\\boxed{Reasoning Process}",
        '<tool_call>{"name": "crop_video", "arguments": {"start": 1.5, "end": 4.0}}</tool_call>',
        "<sub-question>Who wrote it?</sub-question><ret>Text Retriever</ret>",
        "You are a helpful assistant.",
        "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 25 30 40 50 64 100 1000 3.14 0.5",
    ]
    # A fixed, deterministic mix (no randomness: the tokenizer must not depend on a global RNG).
    sentences = [" ".join(words[i : i + 9]) for i in range(0, len(words), 3)]
    return lines * 20 + sentences * 10 + [" ".join(words)] * 10


def build_tokenizer(vocab_size: int) -> Qwen2Tokenizer:
    """A byte-level BPE in Qwen's style, trained on a built-in corpus, as a Qwen2Tokenizer (transformers 5's
    name: Qwen2TokenizerFast is an alias of the same class, absent from its typed exports)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS) - len(ADDED_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    tokenizer = Qwen2Tokenizer(
        tokenizer_object=bpe,
        unk_token=None,  # type: ignore[arg-type]  # transformers annotates str; Qwen's tokenizer has none
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        errors="replace",
        add_prefix_space=False,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:]})
    tokenizer.add_tokens(ADDED_TOKENS)
    tokenizer.chat_template = _TEMPLATE.read_text()
    tokenizer.model_max_length = 32768
    return tokenizer


def token_id(tokenizer: PreTrainedTokenizerBase, token: str) -> int:
    """The id of one token (``convert_tokens_to_ids`` is typed for a list too)."""
    found = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(found, int):
        raise ValueError(f"tokenizer: {token!r} has no single id ({found!r})")
    return found


def _model_config(arch: str, size: TinySize, tokenizer: PreTrainedTokenizerBase) -> PretrainedConfig:
    ids = {name: token_id(tokenizer, name) for name in SPECIAL_TOKENS}
    if arch == "internvl":
        return tiny_families.internvl_config(size, tokenizer)
    if arch in tiny_families.ARCHES:
        return tiny_families.model_config(arch, size, ids, len(tokenizer))
    return model_config(arch, size, ids, max(len(tokenizer), size.model_vocab or 0))


def model_config(
    arch: str, size: TinySize, ids: dict[str, int], vocab_size: int, fullatt_block_indexes: list[int] | None = None
) -> PretrainedConfig:
    """A Qwen2.5-VL / Qwen2-VL config of the given shape; ``ids`` maps the special tokens to their ids."""
    head_dim = size.text_hidden // size.text_heads
    mrope = [head_dim // 8, head_dim // 8 * 3 // 2, head_dim // 8 * 3 // 2]
    mrope[0] += head_dim // 2 - sum(mrope)  # sections must sum to head_dim / 2
    text = dict(
        vocab_size=vocab_size,
        hidden_size=size.text_hidden,
        intermediate_size=size.text_intermediate,
        num_hidden_layers=size.text_layers,
        num_attention_heads=size.text_heads,
        num_key_value_heads=size.text_kv_heads,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": mrope},
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    common: dict[str, Any] = dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    if arch == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig

        vision = dict(
            depth=size.vision_depth,
            hidden_size=size.vision_hidden,
            intermediate_size=size.vision_intermediate,
            num_heads=size.vision_heads,
            out_hidden_size=size.text_hidden,
            window_size=112,
            fullatt_block_indexes=fullatt_block_indexes or [size.vision_depth - 1],
            tokens_per_second=2,
        )
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **common)
    if arch == "qwen2_vl":
        from transformers import Qwen2VLConfig

        vision = dict(
            depth=size.vision_depth,
            embed_dim=size.vision_hidden,
            hidden_size=size.text_hidden,
            num_heads=size.vision_heads,
            mlp_ratio=2,
        )
        return Qwen2VLConfig(text_config=text, vision_config=vision, **common)
    raise ValueError(f"unknown --arch {arch!r}; valid: {', '.join(ARCHES)}")


def _processor(arch: str, tokenizer: PreTrainedTokenizerBase) -> ProcessorMixin:
    if arch in tiny_families.ARCHES:
        return tiny_families.processor(arch, tokenizer)
    from transformers import (
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    image_processor = Qwen2VLImageProcessor(min_pixels=IMAGE_MIN_PIXELS, max_pixels=IMAGE_MAX_PIXELS)
    video_processor = Qwen2VLVideoProcessor(
        min_pixels=VIDEO_MIN_PIXELS, max_pixels=VIDEO_MAX_PIXELS, cap_pixels_per_frame=True
    )
    cls = Qwen2_5_VLProcessor if arch == "qwen2_5_vl" else Qwen2VLProcessor
    return cls(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=tokenizer.chat_template,
    )


def build_tiny_model(
    out_dir: str | Path,
    seed: int = 0,
    arch: str = "qwen2_5_vl",
    size: str = "tiny",
    shape: TinySize | None = None,
) -> Path:
    """Write a loadable checkpoint directory to ``out_dir`` and return its path (``shape``: a shape of the
    caller's instead of ``SIZES[size]``, for benchmarks)."""
    from transformers import AutoModelForImageTextToText

    if shape is None and size not in SIZES:
        raise ValueError(f"unknown --size {size!r}; valid: {', '.join(SIZES)}")
    shape = shape or SIZES[size]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer: PreTrainedTokenizerBase = build_tokenizer(shape.vocab_size)
    if arch in tiny_families.ARCHES:
        tokenizer = tiny_families.tokenizer(arch, tokenizer)
    config = _model_config(arch, shape, tokenizer)
    # Initialise under a private generator state so the global RNG of the caller is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    _processor(arch, tokenizer).save_pretrained(out)
    n_params = sum(p.numel() for p in model.parameters())
    (out / "mmreason_tiny.json").write_text(
        json.dumps({"seed": seed, "arch": arch, "size": size, "parameters": n_params}, indent=2)
    )
    return out


# ---- CLI ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out_dir", help="directory to write the checkpoint to")
    parser.add_argument("--seed", type=int, default=0, help="same seed, same weights and tokenizer")
    parser.add_argument("--arch", choices=ARCHES, default="qwen2_5_vl")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")


def run(args: argparse.Namespace) -> int:
    out = build_tiny_model(args.out_dir, seed=args.seed, arch=args.arch, size=args.size)
    info = json.loads((out / "mmreason_tiny.json").read_text())
    print(f"wrote {info['arch']} ({info['parameters']:,} parameters, seed {info['seed']}) to {out}")
    return 0
