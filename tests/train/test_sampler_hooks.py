"""The trainer's sampler hooks: a prompt drawn twice in one step makes two groups; VAS in `rollouts`
mode is re-scored from fresh rollouts of every prompt, and its state lands in the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.config import load_config
from mmreason.train.config import TrainConfig
from mmreason.train.prompts import build_prompts
from mmreason.train.setup import setup_run
from mmreason.train.step import roll_out

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs/quickstart.yaml")


def test_a_prompt_drawn_twice_makes_two_groups(tiny_model_dir, shapes_cache, tmp_path):
    cfg = load_config(
        TrainConfig,
        QUICKSTART,
        [
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={tmp_path}",
            "rollout.num_generations=3",
            "num_threads=1",
        ],
    )
    run = setup_run(cfg, verbose=False)
    drawn = build_prompts(run, [(0, 5), (1, 5)])  # the same dataset index in two slots
    trajectories = roll_out(run, drawn, step=1)
    assert [t.group_id for t in trajectories] == [0, 0, 0, 1, 1, 1]
    first = [t.token_ids.tolist() for t in trajectories[:3]]
    second = [t.token_ids.tolist() for t in trajectories[3:]]
    assert first != second  # each slot samples under its own seed


@pytest.mark.slow
def test_vas_rollout_mode_refreshes_from_fresh_rollouts(tiny_model_dir, shapes_cache, tmp_path):
    out = tmp_path / "vas"
    assert (
        main(
            [
                "train",
                QUICKSTART,
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "data.task_args={n: 6}",
                "rollout.num_generations=2",
                "rollout.max_completion_length=3",
                "prompts_per_step=2",
                "max_steps=2",
                "save_steps=0",
                "num_threads=1",
                "eval_steps=0",
                "sampler.name=vas",
                "sampler.options={mode: rollouts, update_every: 2}",
            ]
        )
        == 0
    )
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["sampler"]
    assert state["refreshes"] == 1  # before step 1 only (update_every 2)
    assert sorted(i for i, _ in state["scores"]) == list(range(6))  # every prompt was re-scored
