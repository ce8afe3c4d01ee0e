"""The shipped DocSeeker recipes load, carry the paper's defaults, and keep every EGRA page within the
processor's limit (data.max_pixels >= the high budget, so no page is silently shrunk)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmreason.config import load_config
from mmreason.media import pixels_for_tokens
from mmreason.taskpack import TASKS
from mmreason.train.config import TrainConfig
from mmreason.train.setup import run_rewards

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "docseeker"
NAMES = ("docseeker_grpo", "docseeker_sft", "docseeker_grpo_tiny", "docseeker_sft_tiny")


@pytest.mark.parametrize("name", NAMES)
def test_recipe_loads_and_fits_the_high_budget(name):
    cfg = load_config(TrainConfig, CONFIGS / f"{name}.yaml")
    cfg.validate()
    assert cfg.data.task == "docseeker"
    assert cfg.data.max_pixels >= pixels_for_tokens(cfg.data.task_args["egra_high_tokens"])


def test_grpo_recipe_has_the_paper_defaults():
    cfg = load_config(TrainConfig, CONFIGS / "docseeker_grpo.yaml")
    assert (cfg.rollout.num_generations, cfg.learning_rate, cfg.algorithm.beta, cfg.algorithm.kl_estimator) == (
        8,
        1e-6,
        0.04,
        "k3",
    )
    assert (cfg.rollout.max_completion_length, cfg.data.max_prompt_length) == (2048, 16384)
    assert [(r.name, r.weight) for r in run_rewards(cfg, TASKS.get("docseeker"))] == [
        ("docseeker_format", 0.1),
        ("page_fbeta", 0.3),
        ("anls", 0.6),
    ]
    assert cfg.reward_missing == "renormalize"
    assert cfg.data.task_args["egra_k"] == 5 and cfg.data.task_args["egra_low_tokens"] == 256
    sft = load_config(TrainConfig, CONFIGS / "docseeker_sft.yaml")
    assert sft.data.task_args["egra_k"] == 0  # SFT: only the gold pages sharp
