"""Two gloo processes of `mmreason sft` agree on a non-finite gradient that only one of them sees: both skip
the optimizer step (counted and logged on each), so their weights stay the same. Before the shared
``optimizer_step`` (train/optimizer_step.py), SFT checked its gradients on each process alone: process 0
skipped, process 1 stepped, and the two copies of the model drifted apart without a word."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"
HANG = 150  # seconds: a run that has not ended by then is waiting at a collective

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not ACCELERATE.exists() and shutil.which("accelerate") is None, reason="accelerate CLI not installed"
    ),
]

# The SFT run with process 0's gradients turned NaN after clipping (as a shard's gradient that the norm did
# not see would be); each process prints the sum of its weights at the end.
SCRIPT = """
import os
import sys

import accelerate
import torch

from mmreason.config import load_config
from mmreason.parallel.shutdown import finish_processes
from mmreason.train.config import TrainConfig
from mmreason.train.sft import sft

clip = accelerate.Accelerator.clip_grad_norm_


def nan_on_rank0(self, parameters, *args, **kwargs):
    parameters = list(parameters)
    norm = clip(self, parameters, *args, **kwargs)
    if os.environ.get("RANK") == "0":
        next(p for p in parameters if p.grad is not None).grad.fill_(float("nan"))
    return norm


accelerate.Accelerator.clip_grad_norm_ = nan_on_rank0
run = sft(load_config(TrainConfig, sys.argv[1], sys.argv[2:]))
total = sum(float(p.detach().double().sum()) for p in run.accelerator.unwrap_model(run.model).parameters())
print(f"rank {run.accelerator.process_index} weights {total!r}", flush=True)
finish_processes(run.accelerator)
"""


def test_a_nan_gradient_on_one_process_skips_the_sft_step_on_both(tiny_model_dir, shapes_cache, tmp_path):
    script = tmp_path / "sft_nan.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    overrides = [
        f"model.name_or_path={tiny_model_dir}",
        f"output_dir={out}",
        "max_steps=1",
        "prompts_per_step=2",
        "mini_batch_size=2",
        "rollout.max_completion_length=3",
        "num_threads=1",
        "save_steps=0",
    ]
    try:
        run = subprocess.run(
            [
                str(ACCELERATE),
                "launch",
                "--config_file",
                str(ROOT / "configs/accelerate/ddp_cpu.yaml"),
                str(script),
                str(ROOT / "configs" / "quickstart_sft.yaml"),
                *overrides,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the two processes did not end within {HANG} s:\n{(exc.stderr or b'')[-3000:]!r}")
    assert run.returncode == 0, run.stderr[-3000:]
    weights = dict(line.split(" weights ") for line in run.stdout.splitlines() if line.startswith("rank "))
    assert set(weights) == {"rank 0", "rank 1"}, run.stdout[-2000:]
    assert weights["rank 0"] == weights["rank 1"], weights  # no process updated alone
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["skipped_update"] == 1.0 and rows[0]["count/nan_steps"] == 1
    events = [json.loads(x) for x in (out / "events.log").read_text().splitlines()]
    assert {e["rank"] for e in events if e["event"] == "nonfinite_grad"} == {0, 1}
