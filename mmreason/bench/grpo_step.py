"""`mmreason bench grpo-step`: median time split of GRPO steps (generate / reward / update / other)
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


def bench_grpo_step(model_dir: str | None = None, steps: int = 6, warmup: int = 1, threads: int = 1,
                    num_generations: int = 8, prompts: int = 4, max_completion_length: int = 32,
                    pages: int = 0, page_px: int = 224, overrides: tuple[str, ...] = ()) -> dict:
    from mmreason.config import load_config
    from mmreason.models.tiny import build_tiny_model
    from mmreason.train.config import TrainConfig
    from mmreason.train.grpo import train_step
    from mmreason.train.setup import setup_run

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model_dir or str(build_tiny_model(Path(tmp) / "model", seed=0))
        data = ["data.task=shapes"]
        if pages:
            from mmreason.bench.grpo_vs_trl import write_prompts

            (Path(tmp) / "data").mkdir()
            data = ["data.task=vision", f"data.train_path={write_prompts(Path(tmp) / 'data', pages, page_px, 8)}"]
        cfg = load_config(TrainConfig, None, [
            f"model.name_or_path={model_dir}", *data, f"rollout.num_generations={num_generations}",
            f"rollout.max_completion_length={max_completion_length}", f"prompts_per_step={prompts}",
            "mini_batch_size=32", "learning_rate=1e-4", f"output_dir={tmp}/run", "rewards=[{name: anls}]",
            f"max_steps={steps + warmup}", "log_completions_steps=0", *overrides,
        ])
        run = setup_run(cfg, verbose=False)
        rows = [train_step(run, step) for step in range(1, steps + warmup + 1)][warmup:]
    keys = ("time/step", "time/prompts", "time/generate", "time/reward", "time/update", "time/other")
    return {k.split("/")[1]: statistics.median(r[k] for r in rows) for k in keys} | {
        "steps": steps, "threads": threads, "trajectories_per_step": num_generations * prompts,
        "completion_length_mean": statistics.mean(r["completion/length_mean"] for r in rows),
        "prompt": f"{pages} image(s) of {page_px} px" if pages else "shapes (one 56 px image)",
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
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override (repeatable), e.g. --set rollout.temperature=0.7")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    r = bench_grpo_step(args.model, args.steps, 1, args.threads, args.num_generations, args.prompts,
                        args.max_completion_length, args.pages, args.page_px, tuple(args.overrides))
    table = Table(title="GRPO step time (tiny model)")
    for col in ("phase", "seconds", "share"):
        table.add_column(col)
    for phase in ("prompts", "generate", "reward", "update", "other", "step"):
        table.add_row(phase, f"{r[phase]:.3f}", f"{100 * r[phase] / r['step']:.0f} %")
    console = Console()
    console.print(table)
    console.print(f"median of {r['steps']} steps; {r['prompt']} per prompt, {r['trajectories_per_step']} "
                  f"trajectories per step, mean completion {r['completion_length_mean']:.1f} tokens, "
                  f"{r['threads']} thread(s)")
    return 0
