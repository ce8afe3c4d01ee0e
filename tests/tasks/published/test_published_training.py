"""Point 4: a benchmark file as a training config's ``data.train_path``; the pack's reward is its scoring rule."""

from __future__ import annotations

import json

import pytest
import torch
from published_files import chartqa_repo, docvqa_json, mathvista_repo, mmmu_folder, videomme_set

from mmreason.config import load_config
from mmreason.train.config import TrainConfig
from mmreason.train.setup import build_rewards, load_task_data
from mmreason.types import Trajectory


def _traj(text: str, sample_id: str) -> Trajectory:
    return Trajectory(
        sample_id=sample_id,
        group_id=0,
        token_ids=torch.zeros(4, dtype=torch.long),
        action_mask=torch.ones(4, dtype=torch.long),
        prompt_length=0,
        completion_text=text,
    )


CASES = {  # task -> (data builder, a doc id, a right completion, a wrong one)
    "mathvista": (lambda p: mathvista_repo(p), "1", "<think>1.24</think><answer>1.24</answer>", "<answer>1.3</answer>"),
    "mmmu": (lambda p: mmmu_folder(p / "MMMU"), "validation_Art_1", "<answer>(B)</answer>", "<answer>(A)</answer>"),
    "chartqa": (lambda p: chartqa_repo(p), "human_0", "<answer>101</answer>", "<answer>120</answer>"),
    "docvqa": (lambda p: docvqa_json(p), "102", "<answer>J. Smith</answer>", "<answer>nobody</answer>"),
    "videomme": (lambda p: videomme_set(p), "001-2", "<answer>B</answer>", "<answer>C</answer>"),
}


@pytest.mark.parametrize("task", list(CASES))
def test_a_benchmark_file_trains_with_its_scoring_rule_as_reward(tmp_path, task):
    build, doc, right, wrong = CASES[task]
    data = build(tmp_path)
    config = tmp_path / "train.yaml"
    config.write_text(
        json.dumps(
            {
                "model": {"name_or_path": "unused"},
                "data": {"task": task, "train_path": str(data)},
                "output_dir": str(tmp_path / "r"),
            }
        )
    )
    cfg = load_config(TrainConfig, config)
    pack, samples = load_task_data(cfg)
    sample = next(s for s in samples if s.id == doc)
    runner = build_rewards(cfg, pack, str(tmp_path))
    batch = runner([sample, sample], [_traj(right, doc), _traj(wrong, doc)])
    assert batch.names == [f"{task}_reward"]
    assert batch.values[:, 0].tolist() == [1.0, 0.0]
    metric = next(iter(pack.metrics.values()))
    assert [metric(sample, right), metric(sample, wrong)] == [1.0, 0.0]  # the eval metric agrees


@pytest.mark.slow
def test_mmreason_train_runs_a_step_on_testmini_json(tiny_model_dir, tmp_path, one_torch_thread):
    from pathlib import Path

    from mmreason.cli import main

    data = mathvista_repo(tmp_path / "MathVista")
    quickstart = Path(__file__).resolve().parents[3] / "configs" / "quickstart.yaml"
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                str(quickstart),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "data.task=mathvista",
                f"data.train_path={data}",
                "rewards=[]",
                "max_steps=1",
                "eval_steps=0",
                "prompts_per_step=2",
                "rollout.num_generations=2",
                "rollout.max_completion_length=4",
                "num_threads=1",
                "save_steps=0",
            ]
        )
        == 0
    )
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["step"] == 1 and "rewards/mathvista_reward/mean" in row  # the pack's scoring rule as the reward
