"""Two gloo processes on the CPU through `accelerate launch` and the shipped config: the first update
equals a single-process run at the same global batch (a prompt's group stays on one rank), both through
the shared-prefix update (under DDP the unwrapped model runs it and the gradients are averaged by hand)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]


def _args(model_dir, out, prompts):
    return [
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "max_steps=1",
        f"prompts_per_step={prompts}",
        "rollout.num_generations=4",
        "rollout.max_completion_length=4",
        "num_threads=1",
        "log_completions_steps=0",
        "learning_rate=3e-3",
        "eval_steps=0",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
    ]  # varies on the random model's output


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists(),
    reason="accelerate CLI not installed",
)
def test_two_process_first_update_equals_single_process(tiny_model_dir, shapes_cache, tmp_path):
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    accelerate = str(Path(sys.executable).parent / "accelerate")
    two = subprocess.run(
        [
            accelerate,
            "launch",
            "--config_file",
            str(ROOT / "configs/accelerate/ddp_cpu.yaml"),
            "-m",
            "mmreason",
            "train",
            *_args(tiny_model_dir, tmp_path / "ddp", 2),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "processes: 2" in two.stdout
    one = subprocess.run(
        [sys.executable, "-m", "mmreason", "train", *_args(tiny_model_dir, tmp_path / "one", 4)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    base = load_file(Path(tiny_model_dir) / "model.safetensors")
    a = load_file(tmp_path / "ddp" / "checkpoint-1" / "model" / "model.safetensors")
    b = load_file(tmp_path / "one" / "checkpoint-1" / "model" / "model.safetensors")
    # The gradient itself: Adam's first step is ~ lr * sign(g), which hides a wrong scale, so compare the
    # (all-reduced, pre-clip) gradient norm and the rewards the two runs logged.
    ma, mb = (json.loads((tmp_path / d / "metrics.jsonl").read_text().splitlines()[0]) for d in ("ddp", "one"))
    assert ma["update/shared_prefix"] == mb["update/shared_prefix"] == 1.0  # DDP too: gradients averaged by hand
    assert ma["reward/mean"] == pytest.approx(mb["reward/mean"], abs=1e-6)
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-5)
    # The update: equal up to float summation order, which Adam's normalisation can amplify to ~0.1 % of
    # lr on entries whose gradient is ~0; a wrong split of groups would move parameters by ~lr.
    lr = 3e-3
    moved = 0
    for k in base:
        delta_a, delta_b = a[k] - base[k], b[k] - base[k]
        moved += int(delta_b.abs().max() > lr / 2)
        torch.testing.assert_close(delta_a, delta_b, atol=lr * 1e-2, rtol=0, msg=k)
    assert moved > 10  # the update did touch the model
