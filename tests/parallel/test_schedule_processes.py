"""The learning-rate schedule advances once per optimizer step whatever the number of processes: two gloo
processes log the single-process schedule (accelerate's default steps a prepared scheduler once per process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS, LR = 4, 1e-3


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists(),
    reason="accelerate CLI not installed",
)
def test_two_processes_follow_the_one_process_schedule(tiny_model_dir, shapes_cache, tmp_path):
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    accelerate = str(Path(sys.executable).parent / "accelerate")
    run = subprocess.run(
        [
            accelerate,
            "launch",
            "--config_file",
            str(ROOT / "configs/accelerate/ddp_cpu.yaml"),
            "-m",
            "mmreason",
            "train",
            str(ROOT / "configs" / "quickstart.yaml"),
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={tmp_path / 'ddp'}",
            f"max_steps={STEPS}",
            "prompts_per_step=2",
            "rollout.num_generations=2",
            "rollout.max_completion_length=2",
            "num_threads=1",
            "log_completions_steps=0",
            "eval_steps=0",
            "save_steps=0",
            f"learning_rate={LR}",
            "lr_scheduler_type=linear",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "processes: 2" in run.stdout
    rows = [json.loads(line) for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if "lr" in r]
    # linear decay without warm-up, read after each step's update: LR * (1 - k / STEPS) after k updates
    assert lrs == pytest.approx([LR * (1 - k / STEPS) for k in range(1, STEPS + 1)], abs=1e-9)
