"""`mmreason bench grpo-shape`: the 7b shape is Qwen2.5-VL-7B-Instruct's published config (its parameters counted
on the meta device, no allocation), and the bench takes real GRPO steps (generate, update, AdamW) on the tiny
shape. The 7b run itself needs a GPU: scripts/gpu_check.sh runs it."""

from __future__ import annotations

import math

import torch
from transformers import AutoModelForImageTextToText

from mmreason.bench.grpo_shape import grpo_shape
from mmreason.bench.update_throughput import Workload, shape_config


def _published_count(v, d, layers, inter, kv, h, depth, v_inter, out) -> int:
    """Parameters of a Qwen2.5-VL from its config sizes, written out module by module: untied embeddings and head,
    biases on q/k/v only, RMSNorms, a bias-free Conv3d patch embedding (3 x 2 x 14 x 14), vision blocks with
    biased qkv / proj / MLP, and the 2 x 2 patch merger."""
    text = v * d + layers * (2 * d * d + d + 2 * (d * kv + kv) + 3 * d * inter + 2 * d) + d + v * d
    block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * (h * v_inter + v_inter) + (v_inter * h + h)
    merger = h + (4 * h) ** 2 + 4 * h + 4 * h * out + out
    return text + 3 * 2 * 14 * 14 * h + depth * block + merger


# Qwen/Qwen2.5-VL-7B-Instruct's config.json (the vision sizes it leaves to the config class's defaults included)
PUBLISHED_TEXT = dict(
    hidden_size=3584,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    intermediate_size=18944,
    vocab_size=152064,
)
PUBLISHED_VISION = dict(
    depth=32,
    hidden_size=1280,
    out_hidden_size=3584,
    intermediate_size=3420,
    num_heads=16,
    fullatt_block_indexes=[7, 15, 23, 31],
    window_size=112,
)


def test_the_7b_shape_is_qwen2_5_vl_7b_instruct_and_counts_8_29_b_parameters():
    config, ids = shape_config("7b")
    text, vision = config.text_config, config.vision_config
    assert {k: getattr(text, k) for k in PUBLISHED_TEXT} == PUBLISHED_TEXT
    assert {k: getattr(vision, k) for k in PUBLISHED_VISION} == PUBLISHED_VISION
    assert text.rope_parameters["mrope_section"] == [16, 24, 24] and text.rope_parameters["rope_theta"] == 1e6
    assert not config.tie_word_embeddings
    assert (config.image_token_id, config.vision_start_token_id, ids["<|im_end|>"]) == (151655, 151652, 151645)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    assert next(model.parameters()).device.type == "meta"  # nothing allocated
    counted = sum(p.numel() for p in model.parameters())
    assert counted == _published_count(152064, 3584, 28, 18944, 4 * 128, 1280, 32, 3420, 3584)
    assert round(counted / 1e9, 2) == 8.29  # the model card's 8.29 B


def test_the_bench_takes_grpo_steps_that_generate_and_update(one_torch_thread):
    w = Workload(pages=1, image_tokens=4, prompt_text=8, completion_len=5, num_generations=3)
    r = grpo_shape("tiny", w, prompts=2, steps=2, dtype="float32")
    assert r.gradient_checkpointing and r.chunked_head and r.shared_prefix and not r.master_weights
    prompt = w.prompt_text + w.pages * (w.image_tokens + 2)
    assert r.prompt_length == prompt and len(r.steps) == 2
    for s in r.steps:
        assert 0 < s.completion_tokens <= 2 * 3 * 5  # P x G completions of at most 5 tokens
        assert s.sequence_tokens == s.completion_tokens + 2 * 3 * prompt
        assert math.isfinite(s.loss) and 0 < s.grad_norm < math.inf  # rewards differ in a group: a gradient
        assert s.step_s >= s.generate_s + s.update_s
    assert r.generate_tokens_per_s > 0 and r.update_tokens_per_s > 0 and r.peak_memory_gib is None
