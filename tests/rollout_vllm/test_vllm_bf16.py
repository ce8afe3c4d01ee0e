"""model.dtype=bfloat16 with the vLLM backend: the engine runs in the policy's dtype, and the sampler-trainer
log-prob gap is that of two bf16 implementations (far above fp32's ~1e-7, far below a wrong model's)."""

from __future__ import annotations

import pytest
import torch

vllm = pytest.importorskip("vllm")

from tests.rollout_vllm.helpers import colocated_run  # noqa: E402

pytestmark = pytest.mark.vllm


def test_a_bf16_policy_samples_from_a_bf16_engine(tiny_model_dir, shapes_cache, tmp_path):
    from mmreason.train.rollout_backend import close_backend
    from mmreason.train.step import train_step

    run = colocated_run(
        tiny_model_dir,
        tmp_path,
        "model.dtype=bfloat16",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        "rollout.num_generations=4",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "max_steps=2",
        "eval_steps=0",
        "num_threads=1",
    )
    try:
        assert run.rollout_backend.llm.llm_engine.model_config.dtype == torch.bfloat16
        assert next(run.model.parameters()).dtype == torch.bfloat16
        rows = [train_step(run, step) for step in (1, 2)]
    finally:
        close_backend(run)
    for row in rows:
        assert 1e-5 < row["mismatch/logprob_abs_diff_mean"] < 0.05, row["mismatch/logprob_abs_diff_mean"]
        assert row["mismatch/logprob_abs_diff_max"] < 0.5 and abs(row["mismatch/is_weight_mean"] - 1) < 0.05
