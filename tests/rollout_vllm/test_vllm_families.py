"""The other model families through vLLM's CPU build: two GRPO steps of the main job (quickstart, shapes) on
each tiny family model with ``rollout.backend=vllm``, through the real CLI. Every row passes the engine's
check that vLLM expanded the prompt to the trainer's ids (visual tokens included), and the trainer scores
the engine's samples at the engine's log-probs. The tiny Qwen3.5 is refused before any step: vLLM's CPU kernel
for its linear-attention layers takes bf16 and 64- or 128-wide heads only (the tiny model's are 32 wide); built
with 64-wide ones and run in bf16 it trains."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm")

from mmreason.cli import main  # noqa: E402
from mmreason.models.tiny import SIZES, build_tiny_model  # noqa: E402

pytestmark = pytest.mark.vllm
QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")
TWO_STEPS = [
    "rollout.backend=vllm",
    "max_steps=2",
    "prompts_per_step=2",
    "rollout.num_generations=2",
    "rollout.max_completion_length=6",
    "mini_batch_size=4",
    "eval_steps=0",
    "save_steps=0",
    "num_threads=1",
]


@pytest.mark.parametrize("arch", ["qwen3_vl", "internvl"])
def test_two_grpo_steps_of_the_main_job_sample_through_vllm(arch, shapes_cache, tmp_path):
    model = build_tiny_model(tmp_path / arch, seed=0, arch=arch)
    out = tmp_path / "run"
    args = ["train", QUICKSTART, f"model.name_or_path={model}", f"output_dir={out}", "model.dtype=float32"]
    assert main([*args, *TWO_STEPS]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert r["time/weight_sync"] > 0 and r["completion/length_mean"] > 0
        # fp32 on both sides: the engine's log-probs are the trainer's to float rounding
        assert r["mismatch/logprob_abs_diff_max"] < 1e-4, (arch, r["mismatch/logprob_abs_diff_max"])


def test_a_qwen3_5_with_64_wide_linear_heads_runs_in_bf16(shapes_cache, tmp_path):
    """What the CPU kernel takes: the tiny Qwen3.5 with 64-wide linear-attention heads, in bf16, trains two
    steps through the engine; the log-prob gap is two bf16 implementations' (far below a wrong model's)."""
    shape = dataclasses.replace(SIZES["tiny"], linear_head_dim=64)
    model = build_tiny_model(tmp_path / "qwen3_5", seed=0, arch="qwen3_5", shape=shape)
    out = tmp_path / "run"
    args = ["train", QUICKSTART, f"model.name_or_path={model}", f"output_dir={out}", "model.dtype=bfloat16"]
    assert main([*args, *TWO_STEPS]) == 0
    steps = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(0 < r["mismatch/logprob_abs_diff_max"] < 0.1 for r in steps), steps


def test_the_tiny_qwen3_5_is_refused_before_any_step_with_the_reason(shapes_cache, tmp_path, capsys):
    model = build_tiny_model(tmp_path / "qwen3_5", seed=0, arch="qwen3_5")
    for dtype, why in (("float32", "bfloat16 only, not float32"), ("bfloat16", "64- or 128-wide heads only, not 32")):
        out = tmp_path / dtype
        args = ["train", QUICKSTART, f"model.name_or_path={model}", f"output_dir={out}", f"model.dtype={dtype}"]
        assert main([*args, *TWO_STEPS]) != 0
        err = capsys.readouterr().err
        assert "linear-attention (gated delta net)" in err and why in err, err
        assert not (out / "metrics.jsonl").exists()
