"""`mmreason report RUN_DIR|EVAL_DIR [OTHER_DIR] [-o report.html]`: one self-contained HTML file."""

from __future__ import annotations

import argparse

from mmreason.health.report import write_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="DIR",
        help="a run directory (metrics.jsonl), an eval directory or samples file; two to compare",
    )
    parser.add_argument(
        "-o", "--output", default=None, help="the HTML file (default: DIR/report.html, or DIR/compare.html for two)"
    )
    parser.add_argument("--max-rows", type=int, default=50, help="rows a page of a browser shows (default 50)")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=20,
        help="logged steps the rollout browser shows, spread over the run; pages of eval samples (default 20)",
    )
    parser.add_argument("--steps", default="", help="logged steps to show besides those, comma-separated")
    parser.add_argument(
        "--allow-outside-media",
        action="store_true",
        help="inline media from outside the report's directories (absolute or ../ paths, or "
        "relative to the current directory); off: a shared run's report carries only its own",
    )


def run(args: argparse.Namespace) -> int:
    if len(args.paths) > 2:
        raise ValueError(f"mmreason report: one or two directories, not {len(args.paths)}")
    if args.max_rows < 1 or args.max_steps < 1:
        raise ValueError("mmreason report: --max-rows and --max-steps must be at least 1")
    try:
        steps = {int(s) for s in args.steps.split(",") if s.strip()}
    except ValueError:
        raise ValueError(f"mmreason report: --steps takes comma-separated step numbers, not {args.steps!r}") from None
    out = write_report(
        args.paths,
        args.output,
        args.max_rows,
        max_steps=args.max_steps,
        steps=steps,
        allow_outside_media=args.allow_outside_media,
    )
    print(f"report: {out}")
    return 0
