"""Checkpoints survive ``kill -9`` anywhere: a run killed at random moments (generation, backward, the
checkpoint write) and resumed with ``resume=auto`` ends with the parameters of an uninterrupted run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmreason.train.checkpoint import recover

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6


def _command(model_dir, out, *extra) -> list[str]:
    return [
        sys.executable,
        "-m",
        "mmreason",
        "train",
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        f"max_steps={STEPS}",
        "save_steps=1",
        "save_total_limit=2",
        "prompts_per_step=2",
        "rollout.num_generations=4",
        "eval_steps=0",
        "rollout.max_completion_length=5",
        "num_threads=1",
        "log_completions_steps=0",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        *extra,
    ]


def _final(out: Path) -> dict[str, torch.Tensor]:
    return load_file(out / f"checkpoint-{STEPS}" / "model" / "model.safetensors")


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_gives_the_uninterrupted_parameters(
    tiny_model_dir, shapes_cache, tmp_path
):
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    straight = tmp_path / "straight"
    start = time.monotonic()
    subprocess.run(_command(tiny_model_dir, straight), env=env, check=True, capture_output=True, timeout=600)
    duration = time.monotonic() - start
    want = _final(straight)
    killed_with_checkpoints = 0
    for seed in (0, 1):
        out = tmp_path / f"killed-{seed}"
        proc = subprocess.Popen(
            _command(tiny_model_dir, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(random.Random(seed).uniform(0.6, 0.95) * duration)  # late enough to be inside the steps
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_with_checkpoints += any(out.glob("checkpoint-*"))
        subprocess.run(
            _command(tiny_model_dir, out, "resume=auto"), env=env, check=True, capture_output=True, timeout=600
        )
        got = _final(out)
        for k in want:
            assert torch.equal(got[k], want[k]), (seed, k)
    assert killed_with_checkpoints  # at least one kill landed after checkpoints existed


def test_recover_puts_back_an_aside_checkpoint_and_drops_incomplete_ones(tmp_path):
    (tmp_path / "checkpoint-3.old").mkdir()
    (tmp_path / "checkpoint-3.old" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-4.tmp").mkdir()  # no trainer_state.json: killed while writing
    (tmp_path / "checkpoint-5.tmp").mkdir()
    (tmp_path / "checkpoint-5.tmp" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-5.tmp" / "checksums.json").write_text("{}")  # complete, rename never happened
    (tmp_path / "checkpoint-6.tmp").mkdir()  # killed after the state, before the checksums (written last)
    (tmp_path / "checkpoint-6.tmp" / "trainer_state.json").write_text("{}")
    recover(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-3", "checkpoint-5"]
