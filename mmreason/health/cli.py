"""`mmreason report RUN_DIR|EVAL_DIR [OTHER_DIR] [-o report.html]`: one self-contained HTML file."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="DIR",
                        help="a run directory (metrics.jsonl), an eval directory or samples file; two to compare")
    parser.add_argument("-o", "--output", default=None,
                        help="the HTML file (default: DIR/report.html, or DIR/compare.html for two)")
    parser.add_argument("--max-rows", type=int, default=50, help="rows a page of a browser shows (default 50)")


def run(args: argparse.Namespace) -> int:
    from mmreason.health.report import write_report

    if len(args.paths) > 2:
        raise ValueError(f"mmreason report: one or two directories, not {len(args.paths)}")
    print(f"report: {write_report(args.paths, args.output, args.max_rows)}")
    return 0
