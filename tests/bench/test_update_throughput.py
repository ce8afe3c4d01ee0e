"""`mmreason bench update-throughput`: the synthetic group is a valid model input, both log-prob paths run,
and the FLOP count matches one written from the model's modules."""

from __future__ import annotations

import math

import torch

from mmreason.bench.update_throughput import Workload, bench_update, build_model, update_flops
from mmreason.models.loading import backend_note

SMALL = Workload(pages=2, image_tokens=4, prompt_text=8, completion_len=4, num_generations=2)


def test_update_flops_counts_prompt_once_and_head_on_completions_only():
    model, _ = build_model("tiny", torch.float32, "sdpa", torch.device("cpu"))
    cfg = model.config.text_config
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    visual, head = n(model.model.visual), n(model.lm_head)
    body = n(model) - visual - head - n(model.model.language_model.embed_tokens)
    w = SMALL
    p = w.prompt_text + w.pages * (w.image_tokens + 2)  # text + (start, pads, end) per image
    tokens = p + w.num_generations * w.completion_len
    dense = 6 * (visual * 4 * w.pages * w.image_tokens + body * tokens + head * w.num_generations * w.completion_len)
    d, layers, c = cfg.hidden_size, cfg.num_hidden_layers, w.completion_len
    attention = 6 * layers * d * p**2 + w.num_generations * 12 * layers * d * c * (p + c / 2)
    assert math.isclose(update_flops(model, w), dense + attention, rel_tol=1e-12)


def test_bench_runs_the_shared_prefix_and_the_plain_update():
    shared = bench_update("tiny", SMALL, steps=1, warmup=0)
    plain = bench_update("tiny", SMALL, steps=1, warmup=0, shared_prefix=False)
    assert shared["path"] == "shared prefix" and plain["path"] == "plain"
    for r in (shared, plain):
        assert r["sequence_tokens_per_s"] > 0 and math.isfinite(r["sequence_tokens_per_s"])
        assert r["mfu"] is None  # no known peak on CPU
    assert bench_update("tiny", SMALL, steps=1, warmup=0, peak_tflops=1.0)["mfu"] > 0


def test_run_header_names_attention_dtype_and_generation_backend():
    line = backend_note("sdpa", torch.bfloat16)
    assert "attention: sdpa" in line and "dtype: bfloat16" in line
    assert "generation: HF generate" in line and "vLLM" in line
