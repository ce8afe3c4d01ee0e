"""Asynchronous generation on the HF backend, single-turn (``rollout.async_generation`` without an environment):
the background thread samples from the policy copy with the run's settings and seeds, and the run trains."""

from __future__ import annotations

import json
from pathlib import Path

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_hf_single_turn_async_generation_trains_two_steps(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    argv = [
        "train",
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={tiny_model_dir}",
        f"output_dir={out}",
        "rollout.num_generations=2",
        "rollout.max_completion_length=4",
        "rollout.async_generation=true",
        "prompts_per_step=2",
        "max_steps=2",
        "save_steps=0",
        "eval_steps=0",
        "num_threads=1",
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    # the second step trains rows the copy drew one step behind the update (one-step-off)
    assert steps[-1]["async/staleness_mean"] == 1.0
