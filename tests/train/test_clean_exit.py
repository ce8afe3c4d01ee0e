"""A finished run exits 0 on every rank. A worker thread still inside torch's C++ code when the interpreter
finalizes (here: a reward called in a thread that ran past ``reward_timeout_s``, as a slow reward on a loaded machine does)
used to abort the process after the run had finished (``terminate called without an active exception``,
SIGABRT, exit 134): finalization stops such a thread by unwinding its C++ frames, which calls std::terminate.
The end of a run (mmreason/parallel/shutdown.py) now meets on a barrier, joins the worker threads, destroys
the process group, and skips finalization when a worker thread is still running."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"
ABORT = "terminate called without an active exception"

# Its first call outlives the reward timeout (0.5 s) in matrix products, for at most 120 s (the process ends first); later calls answer.
SLOW_REWARD = textwrap.dedent("""
    import time
    import torch

    _calls = []

    def slow_then_zero(prompts, completions, **columns):
        _calls.append(1)
        if len(_calls) == 1:
            torch.set_num_threads(1)
            a, end = torch.randn(200, 200), time.monotonic() + 120.0
            while time.monotonic() < end:
                a = (a @ a).tanh()
        return [0.0] * len(completions)
""")


def _args(model_dir: Path, out: Path, reward: Path, prompts: int) -> list[str]:
    return [
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "max_steps=1",
        f"prompts_per_step={prompts}",
        "rollout.num_generations=2",
        "rollout.max_completion_length=2",
        "num_threads=1",
        "log_completions_steps=0",
        "eval_steps=0",
        "reward_timeout_s=0.5",
        f"rewards=[{{name: {reward}:slow_then_zero, isolation: thread}}]",
    ]


def _check(done: subprocess.CompletedProcess, out: Path) -> None:
    assert ABORT not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "checkpoint-1" / "trainer_state.json").exists()


def test_a_run_with_a_reward_thread_still_running_exits_0(tiny_model_dir, shapes_cache, tmp_path):
    reward = tmp_path / "slow_reward.py"
    reward.write_text(SLOW_REWARD)
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "one"
    done = subprocess.run(
        [sys.executable, "-m", "mmreason", "train", *_args(tiny_model_dir, out, reward, 2)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    _check(done, out)


@pytest.mark.slow
@pytest.mark.skipif(
    not ACCELERATE.exists() and shutil.which("accelerate") is None, reason="accelerate CLI not installed"
)
@pytest.mark.parametrize("config", ["ddp_cpu.yaml", "fsdp_cpu.yaml"])
def test_two_process_runs_exit_0_on_every_rank(tiny_model_dir, shapes_cache, tmp_path, config):
    """A two-process run per launcher config, with a worker thread still running at the end (the first-hour
    matrix, tests/parallel/test_first_hour_matrix.py, launches each config again, six more times)."""
    reward = tmp_path / "slow_reward.py"
    reward.write_text(SLOW_REWARD)
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    done = subprocess.run(
        [
            str(ACCELERATE),
            "launch",
            "--config_file",
            str(ROOT / "configs" / "accelerate" / config),
            "-m",
            "mmreason",
            "train",
            *_args(tiny_model_dir, out, reward, 2),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    _check(done, out)


def test_a_run_called_in_process_returns_to_its_caller_with_a_worker_thread_still_running(
    tiny_model_dir, shapes_cache, tmp_path
):
    """Ending the process past a running worker thread is the entry point's business (``end_process``), never the
    run's: ``mmreason.cli.main`` called inside another program (a test runner, a notebook) returns its code. The
    caller is a child process here, so a run that ended it would show as a missing line, not end this runner."""
    reward = tmp_path / "slow_reward.py"
    reward.write_text(SLOW_REWARD.replace("120.0", "8.0"))  # outlives the run's 5 s join
    out = tmp_path / "in_process"
    caller = (
        f"from mmreason.cli import main; print('returned', main({['train', *_args(tiny_model_dir, out, reward, 2)]!r}))"
    )
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", caller], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert "returned 0" in done.stdout, done.stderr[-2000:]
