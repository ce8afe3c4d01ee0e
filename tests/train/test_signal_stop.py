"""SIGTERM (what ``timeout``, SLURM and Kubernetes send) stops a run cleanly: the step in progress finishes, is
saved, one line says so, the lock is given back, the exit code is 143; ``resume=auto`` continues from that step.
A second SIGTERM ends the process at once. (Before: the process died at once, no checkpoint of the finished
steps, ``run.lock`` left behind.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _args(model_dir: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return [
        "train",
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        f"max_steps={steps}",
        "save_steps=0",
        "prompts_per_step=2",
        "rollout.num_generations=2",
        "rollout.max_completion_length=2",
        "eval_steps=0",
        "num_threads=1",
        "log_completions_steps=1",
        *extra,
    ]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def test_sigterm_finishes_the_step_saves_it_releases_the_lock_and_resume_continues(
    tiny_model_dir, shapes_cache, tmp_path, capsys
):
    out = tmp_path / "run"
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmreason", *_args(tiny_model_dir, out, 500)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and _steps(metrics)) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # step 1 logged: the run loop (and its handler) is running
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    logged = _steps(metrics)
    last = logged[-1]
    assert logged == list(range(1, last + 1)) and last < 500
    assert "SIGTERM received: finishing the step in progress" in err
    assert f"run stopped by SIGTERM after step {last}; last checkpoint: {out / f'checkpoint-{last}'}" in err
    assert "Traceback" not in err
    assert json.loads((out / f"checkpoint-{last}" / "trainer_state.json").read_text())["step"] == last
    assert not (out / "run.lock").exists()
    # resume=auto continues with the next step (in this process: the test pays for one start-up, not two)
    assert main(_args(tiny_model_dir, out, last + 1, "resume=auto")) == 0
    assert f"resumed from {out / f'checkpoint-{last}'} at step {last}" in capsys.readouterr().out
    assert _steps(metrics) == list(range(1, last + 2))


SECOND = textwrap.dedent("""
    import os, signal, time
    from mmreason.train.signals import StopRequest

    request = StopRequest().install()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    print("noted", request.signum == signal.SIGTERM, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    print("still running", flush=True)
""")


def test_a_second_sigterm_ends_the_process_at_once():
    done = subprocess.run([sys.executable, "-c", SECOND], capture_output=True, text=True, timeout=120)
    assert done.returncode == -signal.SIGTERM, done.stderr[-2000:]
    assert done.stdout.split() == ["noted", "True"]
    assert "send SIGTERM again to stop at once" in done.stderr
