"""Gradient accumulation is exact: one step over mini-batches gives the gradient of the whole batch,
for sequence-mean (GRPO) and token-mean (DAPO) aggregation, with and without KL to a reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmreason.config import load_config
from mmreason.train.config import TrainConfig
from mmreason.train.setup import setup_run
from mmreason.train.step import train_step

ROOT = Path(__file__).resolve().parents[2]


def _first_step(tiny_model_dir, tmp_path, mini_batch_size: int, loss_type: str, beta: float) -> dict:
    cfg = load_config(
        TrainConfig,
        ROOT / "configs/quickstart.yaml",
        [
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={tmp_path}/mb{mini_batch_size}",
            "rollout.num_generations=4",
            "rollout.max_completion_length=5",
            "prompts_per_step=3",
            f"mini_batch_size={mini_batch_size}",
            f"algorithm.loss_type={loss_type}",
            f"algorithm.beta={beta}",
            "num_threads=1",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",  # varies on random output
        ],
    )
    run = setup_run(cfg)
    run.step = 1
    return train_step(run, 1)


@pytest.mark.slow
@pytest.mark.parametrize("loss_type,beta", [("grpo", 0.0), ("dapo", 0.0), ("dr_grpo", 0.04)])
def test_mini_batches_give_the_whole_batch_gradient(tiny_model_dir, shapes_cache, tmp_path, loss_type, beta):
    whole = _first_step(tiny_model_dir, tmp_path, 12, loss_type, beta)
    parts = _first_step(tiny_model_dir, tmp_path, 3, loss_type, beta)  # groups of 4 as 3 + 1, three times
    assert whole["reward/mean"] == pytest.approx(parts["reward/mean"], abs=1e-7)  # same rollouts
    assert whole["grad_norm"] > 0
    assert parts["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-5)
