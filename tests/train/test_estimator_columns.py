"""Estimators that need per-trajectory columns (GA-GRPO's fidelity, Step-GRPO's step index) train from a
config; the advantages the trainer logs equal ``mmreason.rl.advantages`` on the same rewards and columns."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from mmreason import rl
from mmreason.cli import main
from mmreason.tasks.shapes.data import shapes_load

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")

# A reward with a score that varies on the random model's output and a `fidelity` sub-score (weight 0).
REWARD_FILE = """
from mmreason.rewarding import per_sample


@per_sample
def graded(sample, trajectory):
    text = trajectory.completion_text
    return {"score": len(set(text) & set(str(sample.answer))) / 4, "fidelity": (len(text) % 4) / 3}
"""


def _run(tiny_model_dir, out, *extra):
    return main(
        [
            "train",
            QUICKSTART,
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={out}",
            "max_steps=1",
            "prompts_per_step=2",
            "rollout.num_generations=4",
            "rollout.max_completion_length=4",
            "log_completions_steps=1",
            "save_steps=0",
            "eval_steps=0",
            "num_threads=1",
            *extra,
        ]
    )


def _logged(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ga_grpo_trains_from_a_config_with_a_fidelity_sub_score(tiny_model_dir, shapes_cache, tmp_path):
    (tmp_path / "graded.py").write_text(REWARD_FILE)
    out = tmp_path / "ga"
    assert (
        _run(
            tiny_model_dir,
            out,
            "algorithm.estimator=ga_grpo",
            "algorithm.estimator_options={a: 0.8}",
            f"rewards=[{{name: {tmp_path}/graded.py:graded, weight: {{score: 1.0, fidelity: 0.0}}}}]",
        )
        == 0
    )
    rows = _logged(out)
    assert len(rows) == 8
    rewards = torch.tensor([[r["rewards"]["graded/score"], r["rewards"]["graded/fidelity"]] for r in rows])
    fidelity = rewards[:, 1]
    assert len(set(fidelity.tolist())) > 1  # the weighting has something to do
    want = rl.advantages(
        "ga_grpo",
        rewards,
        torch.tensor([r["group"] for r in rows]),
        weights=torch.tensor([1.0, 0.0]),
        fidelity=fidelity,
        a=0.8,
    ).advantages
    got = torch.tensor([r["advantage"] for r in rows])
    assert want.abs().sum() > 0
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_step_grpo_trains_from_a_config_with_step_indices(tiny_model_dir, shapes_cache, tmp_path):
    rows = [
        {
            "id": s.id,
            "image": s.images[0],
            "question": "What colour is the shape?",
            "answer": s.answer,
            "step_index": i % 3,
        }
        for i, s in enumerate(shapes_load(split="train")[:8])
    ]
    data = tmp_path / "steps.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "step"
    assert (
        _run(
            tiny_model_dir,
            out,
            "algorithm.estimator=step_grpo",
            f"data.train_path={data}",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        )
        == 0
    )
    logged = _logged(out)
    step_of = {r["id"]: r["step_index"] for r in rows}
    rewards = torch.tensor([r["rewards"]["anls"] for r in logged])
    want = rl.advantages(
        "step_grpo",
        rewards,
        torch.tensor([r["group"] for r in logged]),
        step_index=torch.tensor([step_of[r["sample_id"]] for r in logged]),
    ).advantages
    torch.testing.assert_close(torch.tensor([r["advantage"] for r in logged]), want, atol=1e-5, rtol=0)
    assert not all(math.isclose(a, 0.0) for a in want.tolist())


def test_a_missing_column_is_an_error_at_start_naming_it_and_its_producers(
    tiny_model_dir, shapes_cache, tmp_path, capsys
):
    assert _run(tiny_model_dir, tmp_path / "x", "algorithm.estimator=ga_grpo") == 2
    assert re.search(r"estimator 'ga_grpo' needs .*'fidelity'.*tool_grounding", capsys.readouterr().err)
    assert not (tmp_path / "x" / "metrics.jsonl").exists()  # nothing was trained
