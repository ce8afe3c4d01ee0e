"""`mmreason bench NAME`: benchmarks that give later speed work a baseline (figures, not assertions)."""

from __future__ import annotations

import argparse
import importlib

# name -> (module with add_arguments/run, one-line help)
BENCHES = {
    "grpo-step": ("mmreason.train.bench", "time split of one GRPO step on a fixed tiny config"),
    "eval-overhead": ("mmreason.eval.bench", "evaluation harness vs bare batched generate"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True, metavar="NAME")
    for name, (module, help_text) in BENCHES.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_bench_module=module)
        try:
            importlib.import_module(module).add_arguments(p)
        except ImportError:
            p.set_defaults(_bench_missing=True)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args._bench_module).run(args) or 0)
