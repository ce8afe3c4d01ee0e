"""Difficulty-aware augmentation in a videoqa run (augment.enabled): hard groups are regenerated with a hint that
never holds the answer, easy ones with frame noise; the fractions are logged; the state survives a resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.tasks.videoqa.synth import generate

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "videoqa" / "videoqa_reg_grpo_tiny.yaml"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _run(model, data, out: Path, reward_file: Path, *extra: str) -> None:
    # A reward fixed by the question (1 for mcq, 0 otherwise) makes every group uniform and the groups differ:
    # mcq groups are easier than the recent mean (noise), the others harder (a hint from their earlier trace).
    rewards = [{"name": f"{reward_file}:by_type", "weight": 1.0}]
    augment = {"enabled": True, "min_buffer": 1, "window": 8, "threshold": 0.05}
    assert (
        main(
            [
                "train",
                str(CONFIG),
                f"model.name_or_path={model}",
                f"output_dir={out}",
                "num_threads=1",
                f"data.train_path={data}",
                "prompts_per_step=4",
                "eval_steps=0",
                "save_steps=1",
                "save_total_limit=5",
                "rewards=" + json.dumps(rewards),
                "augment=" + json.dumps(augment),
                *extra,
            ]
        )
        == 0
    )


@pytest.fixture
def setup(tmp_path):
    reward_file = tmp_path / "by_type.py"
    reward_file.write_text(
        "def by_type(prompts, completions, answer_type, **columns):\n"
        "    return [float(t == 'mcq') for t in answer_type]\n"
    )
    return generate(tmp_path / "d", 1, seed=2, seconds=(3, 4), size=64), reward_file  # 4 questions, 1 video


@pytest.mark.slow
def test_hints_and_noise_are_logged_and_resume_replays_them(tiny_model_dir, tmp_path, setup, one_torch_thread):
    data, reward_file = setup
    straight = tmp_path / "straight"
    _run(tiny_model_dir, data, straight, reward_file, "max_steps=3")
    metrics = _jsonl(straight / "metrics.jsonl")
    later = metrics[1:]  # from step 2 on every question has an earlier trace to hint from
    assert all(m["augment/frac_hint"] > 0 and m["augment/frac_noise"] > 0 for m in later)
    assert all(0 < m["augment/strength_mean"] <= 1 for m in later)
    rows = _jsonl(straight / "completions.jsonl")
    answers = {json.loads(line)["id"]: json.loads(line) for line in data.read_text().splitlines()}
    hinted = [r for r in rows if "\nHint: " in r["prompt"]]
    assert hinted and all(r["sample_id"] != "videoqa-2-0-mcq" for r in hinted)  # mcq groups are the easy ones
    for r in hinted:
        hint = r["prompt"].split("\nHint: ", 1)[1].lower()
        assert str(answers[r["sample_id"]]["answer"]).lower() not in hint.split()
    saved = json.loads((straight / "checkpoint-3" / "trainer_state.json").read_text())
    state = saved["augment"]
    assert saved["augment_by_rank"] == [state]  # one process: its own state is the main one
    assert len(state["buffer"]) == 8 and set(state["best"]) == set(answers)
    # resume from step 2: the FIFO and best traces come back, so step 3 plans and samples the same
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-2", resumed / "checkpoint-2")
    _run(tiny_model_dir, data, resumed, reward_file, "max_steps=3", "resume=auto")
    again = json.loads((resumed / "checkpoint-3" / "trainer_state.json").read_text())["augment"]
    assert again == state
    step3 = [
        [(r["sample_id"], r["prompt"], r["completion"]) for r in _jsonl(d / "completions.jsonl") if r["step"] == 3]
        for d in (straight, resumed)
    ]
    assert step3[0] == step3[1] and step3[0]
    assert _jsonl(resumed / "metrics.jsonl")[-1]["augment/frac_hint"] == metrics[-1]["augment/frac_hint"]
