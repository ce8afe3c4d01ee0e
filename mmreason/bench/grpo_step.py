"""`mmreason bench grpo-step`: median time split of GRPO steps (prompts / generate / reward / advantages /
update / other)
on a fixed tiny config, single-threaded by default because shared 2-core machines are noisy.

Prompts are the shapes task's (one 56 px image each) or, with ``--pages P --page-px X``, P noise images of
X px each (a document-like prompt, as ``bench grpo-vs-trl`` builds them); ``--set KEY=VALUE`` overrides
any config key."""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from mmreason.bench.grpo_vs_trl import write_prompts
from mmreason.config import load_config
from mmreason.models.tiny import build_tiny_model
from mmreason.train.config import TrainConfig
from mmreason.train.rollout_backend import check_backend_config, close_backend, make_backend
from mmreason.train.setup import setup_run
from mmreason.train.step import train_step


def bench_grpo_step(
    model_dir: str | None = None,
    *,
    steps: int = 6,
    warmup: int = 1,
    threads: int = 1,
    num_generations: int = 8,
    prompts: int = 4,
    max_completion_length: int = 32,
    pages: int = 0,
    page_px: int = 224,
    overrides: tuple[str, ...] = (),
    backend: str = "hf",
    size: str = "tiny",
) -> dict:
    """Median step split with ``rollout.backend=backend`` (hf | vllm); ``size``: the built-in model's, when
    ``model_dir`` is not given."""
    return bench_grpo_steps(
        model_dir,
        steps=steps,
        warmup=warmup,
        threads=threads,
        num_generations=num_generations,
        prompts=prompts,
        max_completion_length=max_completion_length,
        pages=pages,
        page_px=page_px,
        variants=[(backend, overrides)],
        size=size,
    )[0]


def bench_grpo_steps(
    model_dir: str | None,
    *,
    steps: int,
    warmup: int,
    threads: int,
    num_generations: int,
    prompts: int,
    max_completion_length: int,
    pages: int,
    page_px: int,
    variants: list[tuple[str, tuple[str, ...]]],
    size: str = "tiny",
) -> list[dict]:
    """One run per variant (backend, config overrides), set up together and stepped in turns (step 1 of every
    run, then step 2, ...), so that a shared machine's load falls on all of them alike; a result per variant."""

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model_dir or str(build_tiny_model(Path(tmp) / "model", seed=0, size=size))
        data = ["data.task=shapes"]
        if pages:
            (Path(tmp) / "data").mkdir()
            data = ["data.task=vision", f"data.train_path={write_prompts(Path(tmp) / 'data', pages, page_px, 8)}"]
        runs = []
        try:
            for i, (backend, overrides) in enumerate(variants):
                cfg = load_config(
                    TrainConfig,
                    None,
                    [
                        f"model.name_or_path={model_dir}",
                        *data,
                        f"rollout.num_generations={num_generations}",
                        f"rollout.max_completion_length={max_completion_length}",
                        f"prompts_per_step={prompts}",
                        "mini_batch_size=32",
                        "learning_rate=1e-4",
                        "optim=adamw_torch_fused",
                        f"output_dir={tmp}/run{i}",
                        "rewards=[{name: anls}]",
                        f"max_steps={steps + warmup}",
                        "log_completions_steps=0",
                        f"rollout.backend={backend}",
                        *overrides,
                    ],
                )
                check_backend_config(cfg)
                runs.append(setup_run(cfg, verbose=False))
                runs[-1].rollout_backend = make_backend(runs[-1])
            rows: list[list[dict]] = [[] for _ in runs]
            for step in range(1, steps + warmup + 1):
                for run, out in zip(runs, rows):
                    out.append(train_step(run, step))
        finally:
            for run in runs:
                close_backend(run)
    return [
        _summary(out[warmup:], backend, steps, threads, num_generations, prompts=prompts)
        for out, (backend, _) in zip(rows, variants)
    ]


def _summary(rows: list[dict], backend: str, steps: int, threads: int, num_generations: int, *, prompts: int) -> dict:
    keys = ("time/step", "time/prompts", "time/generate", "time/reward", "time/advantages", "time/update", "time/other")
    tokens = [r["completion/length_mean"] * num_generations * prompts for r in rows]
    return {k.split("/")[1]: statistics.median(r[k] for r in rows) for k in keys} | {
        "backend": backend,
        "weight_sync": statistics.median(r.get("time/weight_sync", 0.0) for r in rows),
        "generate_tokens_per_s": statistics.median(t / r["time/generate"] for t, r in zip(tokens, rows)),
        "steps": steps,
        "threads": threads,
        "trajectories_per_step": num_generations * prompts,
        "completion_length_mean": statistics.mean(r["completion/length_mean"] for r in rows),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory (default: a fresh tiny model)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--pages", type=int, default=0, help="P noise images per prompt (default: the shapes task)")
    parser.add_argument("--page-px", type=int, default=224, help="side of each --pages image in pixels")
    parser.add_argument("--backend", default="hf", help="hf | vllm | hf,vllm (both, with the ratio)")
    parser.add_argument("--size", default="tiny", help="the built-in model's size when --model is not given")
    parser.add_argument(
        "--dtype", default=None, help="model.dtype, or several (float32,bfloat16): each backend in each dtype, in turns"
    )
    parser.add_argument("--repeats", type=int, default=1, help="rounds of the variants' runs (medians)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override (repeatable), e.g. --set rollout.temperature=0.7",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    dtypes = args.dtype.split(",") if args.dtype else [None]
    variants = [(b, d) for b in args.backend.split(",") for d in dtypes]
    rounds = [
        bench_grpo_steps(
            args.model,
            steps=args.steps,
            warmup=1,
            threads=args.threads,
            num_generations=args.num_generations,
            prompts=args.prompts,
            max_completion_length=args.max_completion_length,
            pages=args.pages,
            page_px=args.page_px,
            variants=[(b, tuple(args.overrides) + ((f"model.dtype={d}",) if d else ())) for b, d in variants],
            size=args.size,
        )
        for _ in range(max(1, args.repeats))
    ]
    prompt = f"{args.pages} image(s) of {args.page_px} px" if args.pages else "shapes (one 56 px image)"
    results = [
        _median_round([r[i] for r in rounds]) | {"dtype": d, "prompt": prompt} for i, (_, d) in enumerate(variants)
    ]
    table = Table(title=f"GRPO step time ({args.model or args.size + ' model'})")
    table.add_column("phase")
    for r in results:
        table.add_column(f"{r['backend']}{', ' + r['dtype'] if r['dtype'] else ''} seconds")
        table.add_column("share")
    for phase in ("prompts", "generate", "reward", "advantages", "update", "weight_sync", "other", "step"):
        table.add_row(phase, *[x for r in results for x in (f"{r[phase]:.3f}", f"{100 * r[phase] / r['step']:.0f} %")])
    table.add_row("generated tokens/s", *[x for r in results for x in (f"{r['generate_tokens_per_s']:.0f}", "")])
    console = Console()
    console.print(table)
    if dtypes[0] and len(dtypes) > 1:
        for b, d in variants:
            if d != dtypes[0]:
                base = results[variants.index((b, dtypes[0]))]
                r = results[variants.index((b, d))]
                console.print(
                    f"{b}: {d} / {dtypes[0]}: generation {r['generate'] / base['generate']:.2f}x, "
                    f"update {r['update'] / base['update']:.2f}x, step {r['step'] / base['step']:.2f}x "
                    "(time ratios)"
                )
    elif len(results) == 2:
        a, b = results
        console.print(
            f"{b['backend']} / {a['backend']}: generation {b['generate_tokens_per_s'] / a['generate_tokens_per_s']:.2f}x "
            f"tokens/s, step {a['step'] / b['step']:.2f}x faster (weight sync is part of update)"
        )
    r = results[-1]
    console.print(
        f"median of {r['steps']} steps (the variants' steps in turns); {r['prompt']} per prompt, {r['trajectories_per_step']} "
        f"trajectories per step, mean completion {r['completion_length_mean']:.1f} tokens, "
        f"{r['threads']} thread(s)"
    )
    return 0


def _median_round(rows: list[dict]) -> dict:
    """Per key, the median over rounds of the numbers (the first round's value otherwise)."""
    return {k: statistics.median(r[k] for r in rows) if isinstance(v, (int, float)) else v for k, v in rows[0].items()}
