"""Tiny checkpoints of the families beyond Qwen2/2.5-VL, for ``mmreason tiny-model --arch``: Qwen3-VL (dense
and MoE) and Qwen3.5 (hybrid linear / full attention, Qwen3-VL's vision tower without DeepStack).

Same recipe as ``tiny.py``: the real transformers classes with random weights, the local tokenizer (Qwen's
special tokens and chat template, which Qwen3-VL shares), and the family's own processor, here
``Qwen3VLProcessor`` with 16 px patches merged 2 x 2. Every attention head (text and vision) is 32 wide, the
smallest vLLM's CPU attention accepts. Same seed, same bytes (``tiny.build_tiny_model`` seeds the weights).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mmreason.models.tiny_size import TinySize

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedTokenizerBase, ProcessorMixin

# Qwen3-VL: 32 x 32 pixels per visual token; 4..64 tokens an image, a clip's pixels over all its frames.
QWEN3_PIXELS_PER_TOKEN = 32 * 32
QWEN3_IMAGE_MIN_PIXELS = 4 * QWEN3_PIXELS_PER_TOKEN
QWEN3_IMAGE_MAX_PIXELS = 64 * QWEN3_PIXELS_PER_TOKEN
QWEN3_VIDEO_MIN_PIXELS = 8 * QWEN3_PIXELS_PER_TOKEN
QWEN3_VIDEO_MAX_PIXELS = 128 * QWEN3_PIXELS_PER_TOKEN

ARCHES = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "internvl")
HEAD_DIM = 32


# InternVL: 64 px tiles of 16 px patches, pixel-shuffled 2 x 2 (downsample_ratio 0.5): 4 tokens a tile.
INTERNVL_TILE = 64
INTERNVL_TOKENS_PER_TILE = (INTERNVL_TILE // 16 // 2) ** 2
INTERNVL_TOKENS = {
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "context_image_token": "<IMG_CONTEXT>",
    "video_token": "<video>",
}


def tokenizer(arch: str, tok: PreTrainedTokenizerBase) -> PreTrainedTokenizerBase:
    """The local tokenizer as the family needs it: InternVL adds its image tokens and writes one
    ``<IMG_CONTEXT>`` per image (``<video>`` per video) in the chat template, which its processor expands."""
    if arch != "internvl":
        return tok
    tok.add_tokens(list(INTERNVL_TOKENS.values()), special_tokens=True)
    tok._set_model_specific_special_tokens(special_tokens=dict(INTERNVL_TOKENS))  # named: tok.context_image_token
    tok.chat_template = tok.chat_template.replace(
        "<|vision_start|><|image_pad|><|vision_end|>", "<IMG_CONTEXT>\n"
    ).replace("<|vision_start|><|video_pad|><|vision_end|>", "<video>\n")
    return tok


def internvl_config(size: TinySize, tok: PreTrainedTokenizerBase) -> PretrainedConfig:
    """InternVL (InternViT-style vision tower, pixel-shuffle projector, Qwen2 decoder with 1-D RoPE)."""
    from transformers import InternVLConfig

    heads = max(size.text_hidden // HEAD_DIM, 2)
    text = dict(
        model_type="qwen2",
        vocab_size=len(tok),
        hidden_size=size.text_hidden,
        intermediate_size=size.text_intermediate,
        num_hidden_layers=size.text_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(heads // 2, 1),
        head_dim=HEAD_DIM,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        bos_token_id=tok.pad_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    vision_hidden = max(size.vision_hidden, 2 * HEAD_DIM)
    vision = dict(
        hidden_size=vision_hidden,
        num_hidden_layers=size.vision_depth,
        num_attention_heads=vision_hidden // HEAD_DIM,
        intermediate_size=2 * vision_hidden,
        image_size=[INTERNVL_TILE, INTERNVL_TILE],
        patch_size=[16, 16],
    )
    return InternVLConfig(
        vision_config=vision,
        text_config=text,
        image_token_id=tok.context_image_token_id,
        image_seq_length=INTERNVL_TOKENS_PER_TILE,
        downsample_ratio=0.5,
        tie_word_embeddings=False,
    )


def model_config(arch: str, size: TinySize, ids: dict[str, int], vocab_size: int) -> PretrainedConfig:
    """A Qwen3-VL (dense or MoE) config of the given ``tiny.TinySize`` shape, 32-wide heads."""
    heads = max(size.text_hidden // HEAD_DIM, 2)
    text = dict(
        vocab_size=vocab_size,
        hidden_size=size.text_hidden,
        intermediate_size=size.text_intermediate,
        num_hidden_layers=size.text_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(heads // 2, 1),
        head_dim=HEAD_DIM,
        max_position_embeddings=32768,
        # interleaved M-RoPE: t, h, w frequencies interleaved; sections sum to head_dim / 2
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        },
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    vision_hidden = max(size.vision_hidden, 2 * HEAD_DIM)
    vision = dict(
        depth=size.vision_depth,
        hidden_size=vision_hidden,
        intermediate_size=2 * vision_hidden,
        num_heads=vision_hidden // HEAD_DIM,
        out_hidden_size=size.text_hidden,
        patch_size=16,
        spatial_merge_size=2,
        temporal_patch_size=2,
        num_position_embeddings=256,
        deepstack_visual_indexes=list(range(min(2, size.vision_depth))),  # DeepStack from the first layers
    )
    common: dict[str, Any] = dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    if arch == "qwen3_vl":
        from transformers import Qwen3VLConfig

        return Qwen3VLConfig(text_config=text, vision_config=vision, **common)
    if arch == "qwen3_vl_moe":
        from transformers import Qwen3VLMoeConfig

        text.update(
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=size.text_intermediate // 2,
            decoder_sparse_step=1,
            tie_word_embeddings=False,
        )
        return Qwen3VLMoeConfig(text_config=text, vision_config=vision, **common)
    if arch == "qwen3_5":
        from transformers import Qwen3_5Config

        # hybrid decoder: a gated-delta-net (linear attention) layer before each full-attention one; rotary on
        # half of each head (partial_rotary_factor), interleaved M-RoPE sections summing to 32 * 0.5 / 2
        text.update(
            layer_types=["linear_attention", "full_attention"] * max(size.text_layers // 2, 1),
            num_hidden_layers=2 * max(size.text_layers // 2, 1),
            linear_conv_kernel_dim=4,
            linear_key_head_dim=size.linear_head_dim or HEAD_DIM,
            linear_value_head_dim=size.linear_head_dim or HEAD_DIM,
            linear_num_key_heads=2,
            linear_num_value_heads=2,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000000.0,
                "mrope_section": [3, 3, 2],
                "mrope_interleaved": True,
                "partial_rotary_factor": 0.5,
            },
        )
        vision.pop("deepstack_visual_indexes")
        return Qwen3_5Config(text_config=text, vision_config=vision, **common)
    raise ValueError(f"unknown --arch {arch!r}; valid: {', '.join(ARCHES)}")


def processor(arch: str, tokenizer: PreTrainedTokenizerBase) -> ProcessorMixin:
    """``Qwen3VLProcessor`` with 16 px patches (the image processor is Qwen2-VL's, as on the hub; Qwen3.5
    checkpoints ship the same processor class)."""
    if arch == "internvl":
        from transformers import GotOcr2ImageProcessor, InternVLProcessor, InternVLVideoProcessor

        tile = {"height": INTERNVL_TILE, "width": INTERNVL_TILE}
        return InternVLProcessor(
            image_processor=GotOcr2ImageProcessor(size=tile, crop_to_patches=False),
            tokenizer=tokenizer,
            video_processor=InternVLVideoProcessor(size=tile),
            image_seq_length=INTERNVL_TOKENS_PER_TILE,
            chat_template=tokenizer.chat_template,
        )
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor, Qwen3VLVideoProcessor

    images = Qwen2VLImageProcessor(
        patch_size=16, merge_size=2, min_pixels=QWEN3_IMAGE_MIN_PIXELS, max_pixels=QWEN3_IMAGE_MAX_PIXELS
    )
    videos = Qwen3VLVideoProcessor(
        patch_size=16,
        merge_size=2,
        size={"shortest_edge": QWEN3_VIDEO_MIN_PIXELS, "longest_edge": QWEN3_VIDEO_MAX_PIXELS},
    )
    return Qwen3VLProcessor(
        image_processor=images, tokenizer=tokenizer, video_processor=videos, chat_template=tokenizer.chat_template
    )
