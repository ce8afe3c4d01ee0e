"""`mmreason eval`, with lmms-eval's flags; `mmreason eval compare RESULTS.json RESULTS.json ...` (metric deltas);
`mmreason eval paired A_SAMPLES B_SAMPLES` (doc-by-doc, McNemar); `mmreason eval baseline --task PACK` (the pack's
model-free rule, scored with its metrics); `mmreason eval score --tasks PACK:PATH --predictions FILE` (saved answers).

    mmreason eval --model runs/shapes --tasks shapes,shapes:my.jsonl --batch_size 8 \\
        --output_path eval_results --log_samples --limit 100 \\
        --gen_kwargs temperature=0,max_new_tokens=256 --model_args max_pixels=802816,dtype=bfloat16
"""

from __future__ import annotations

import argparse

from mmreason.config import ConfigError
from mmreason.eval import baseline, compare, paired, rescore
from mmreason.eval.config import EvalConfig, parse_gen_kwargs, parse_kv, parse_model_args
from mmreason.eval.harness import evaluate
from mmreason.listing import run as list_run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Options are spelled out: `eval baseline --task` would otherwise be taken as an abbreviation of --tasks.
    parser.allow_abbrev = False
    sub = parser.add_subparsers(dest="eval_command", metavar="{compare,paired,baseline,score}")
    compare.add_arguments(sub.add_parser("compare", help="metric deltas between results files, and a PNG chart"))
    paired.add_arguments(sub.add_parser("paired", help="two samples files doc by doc: up / down, McNemar z"))
    baseline.add_arguments(sub.add_parser("baseline", help="a pack's model-free baseline, scored with its metrics"))
    rescore.add_arguments(sub.add_parser("score", help="saved answers scored by a task's metrics, no model"))
    parser.add_argument(
        "--model",
        help="a model directory, a LoRA adapter, a `mmreason train` run directory (its newest checkpoint) or a hub id",
    )
    parser.add_argument(
        "--tasks",
        help="comma-separated task packs (`mmreason list tasks`), or PACK:PATH to "
        "run a pack's prompt and metrics on your JSONL/parquet; `list` lists them",
    )
    parser.add_argument("--batch_size", type=int, default=1, help="docs per generate call")
    parser.add_argument("--output_path", default="eval_results", help="results go to OUTPUT_PATH/<model_name>/")
    parser.add_argument("--log_samples", action="store_true", help="keep <timestamp>_samples_<task>.jsonl")
    parser.add_argument("--limit", type=float, default=None, help="first N docs per task (< 1: a fraction)")
    parser.add_argument("--gen_kwargs", default="", help="e.g. temperature=0,max_new_tokens=256,top_p=1")
    parser.add_argument(
        "--model_args",
        default="",
        help="e.g. min_pixels=3136,max_pixels=802816,"
        "attn_implementation=sdpa,dtype=bfloat16,adapter=PATH,video_fps=2,video_max_frames=16",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds sampling (per doc) and everything else")
    parser.add_argument("--device", default=None, help="cuda, cuda:1, cpu (default: cuda when available)")
    parser.add_argument(
        "--task_args",
        default="",
        help="options for the task packs' loaders, as a training "
        "config's data.task_args, e.g. n=100 (given to every task of the run)",
    )
    parser.add_argument(
        "--environment",
        default=None,
        help="pkg.module:Factory or path/file.py:Factory: your environment on every task; "
        "episodes of --gen_kwargs max_turns (default: the environment's own)",
    )
    parser.add_argument(
        "--environment_args", default="", help="keyword arguments of the environment's factory, e.g. max_calls=2"
    )


def build_config(args: argparse.Namespace) -> EvalConfig:
    if not args.model or not args.tasks:
        raise ConfigError("mmreason eval needs --model and --tasks (or: mmreason eval compare A.json B.json)")
    cfg = EvalConfig(
        model=args.model,
        tasks=[args.tasks],
        batch_size=args.batch_size,
        output_path=args.output_path,
        log_samples=args.log_samples,
        limit=args.limit,
        gen_kwargs=parse_gen_kwargs(args.gen_kwargs),
        model_args=parse_model_args(args.model_args),
        seed=args.seed,
        device=args.device,
        task_args=parse_kv(args.task_args, "--task_args"),
        environment=args.environment,
        environment_args=parse_kv(args.environment_args, "--environment_args"),
    )
    cfg.validate()
    return cfg


def run(args: argparse.Namespace) -> int:
    if args.eval_command == "compare":
        return compare.run(args)
    if args.eval_command == "paired":
        return paired.run(args)
    if args.eval_command == "baseline":
        return baseline.run(args)
    if args.eval_command == "score":
        return rescore.run(args)
    if args.tasks == "list":
        return list_run(argparse.Namespace(kind="tasks"))

    evaluate(build_config(args))
    return 0
