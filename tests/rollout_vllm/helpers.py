"""What the vLLM test modules share: starting ``mmreason vllm-serve`` on a free port, the CLI arguments of a
short run through a server, a run with its engine built in-process, and the check that an engine's log-probs
are the trainer's on what it sampled."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir, log: Path, *args: str, env: dict | None = None, deadline_s: float = 300) -> tuple:
    """(process, port) of ``mmreason vllm-serve model_dir --max_model_len 1024 *args`` on a free port, once its
    log (``log``) says it is ready; a server that dies or is not ready in ``deadline_s`` fails the test with its
    log's end."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    # vLLM sets this for the in-process engines earlier tests built in this process; a server runs its own
    # engine process, as a user's does
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    command = [sys.executable, "-m", "mmreason", "vllm-serve", str(model_dir), "--port", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*command, "--max_model_len", "1024", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    deadline = time.monotonic() + deadline_s
    try:
        while "ready at" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
    except BaseException:
        stop_server(proc, port)
        raise
    return proc, port


def stop_server(proc: subprocess.Popen, port: int) -> None:
    """Stop the server (killed when its engine's shutdown takes long on a loaded machine) and remove its token."""
    from mmreason.rollout.backends.vllm_auth import token_file

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    token_file(port).unlink(missing_ok=True)  # the server removes it, unless it was killed


def server_train_args(model_dir, port: int, out, *extra: str, generations: int = 2) -> list[str]:
    """CLI args of a quickstart run on ``model_dir`` sampling through the server at ``port`` (``generations``
    rows a prompt, 2 prompts a step, 4 tokens) into ``out``; ``extra`` overrides follow."""
    return [
        "train",
        QUICKSTART,
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        "rollout.backend=vllm",
        "rollout.vllm_mode=server",
        f"rollout.vllm_server_port={port}",
        "rollout.vllm_server_timeout=5",
        f"rollout.num_generations={generations}",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "eval_steps=0",
        "logging_steps=1",
        "num_threads=1",
        *extra,
    ]


def colocated_run(model_dir, out, *overrides: str):
    """A quickstart run on ``model_dir`` (its setup, ``overrides`` applied) with its colocated vLLM engine built;
    the caller closes it with ``close_backend(run)``."""
    from mmreason.config import load_config
    from mmreason.train.config import TrainConfig
    from mmreason.train.rollout_backend import make_backend
    from mmreason.train.setup import setup_run

    overrides = (f"model.name_or_path={model_dir}", f"output_dir={out}", "rollout.backend=vllm", *overrides)
    run = setup_run(load_config(TrainConfig, QUICKSTART, list(overrides)), verbose=False)
    run.rollout_backend = make_backend(run)
    return run


def assert_rollout_logprobs_are_the_trainers(model, processor, sampled, tol: float = 1e-3) -> None:
    """The log-probs the engine returned with ``sampled`` equal ``model``'s on every sampled token, to ``tol``."""
    from mmreason.rollout.forward import collate, token_logprobs
    from mmreason.rollout.generate import suppressed_token_ids

    batch = collate(sampled, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch, suppressed=suppressed_token_ids(processor.tokenizer))
    mask = batch.action_mask.bool()
    rollout = torch.zeros_like(logp)
    for i, t in enumerate(sampled):
        rollout[i, : t.token_ids.numel()] = t.rollout_logprobs
    assert mask.sum() > 0 and (logp[mask] - rollout[mask]).abs().max() < tol


def zoom_args(model, data, out, *extra: str) -> list[str]:
    """CLI args of a run of the zoom example's GRPO recipe (configs/generic/zoom_grpo_tiny.yaml) on ``model``
    and the rows ``data``, sampling through the colocated engine (2 prompts x 2 rows, near-greedy: the call the
    model was taught), into ``out``; ``extra`` overrides follow. Run from the repository root (the recipe names
    the example by its path from there)."""
    return [
        "train",
        str(ROOT / "configs" / "generic" / "zoom_grpo_tiny.yaml"),
        f"model.name_or_path={model}",
        f"data.train_path={data}",
        f"output_dir={out}",
        "rollout.backend=vllm",
        "rollout.num_generations=2",
        "rollout.temperature=0.1",
        "prompts_per_step=2",
        "mini_batch_size=4",
        "log_completions_steps=0",
        "eval_steps=0",
        "num_threads=1",
        *extra,
    ]
