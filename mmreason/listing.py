"""`mmreason list tasks|rewards|estimators|losses|samplers|rollouts`: what the registries hold, one line each."""

from __future__ import annotations

import argparse
import importlib

# kind -> (module, attribute holding a Registry)
REGISTRIES = {
    "tasks": ("mmreason.taskpack", "TASKS"),
    "rewards": ("mmreason.rewarding", "REWARDS"),
    "estimators": ("mmreason.rl", "ESTIMATORS"),
    "losses": ("mmreason.rl", "POLICY_LOSSES"),
    "samplers": ("mmreason.sampling", "SAMPLERS"),
    "rollouts": ("mmreason.sampling", "WITHIN_STEP"),
}


def rows(kind: str) -> list[tuple[str, str]]:
    module, attr = REGISTRIES[kind]
    return getattr(importlib.import_module(module), attr).describe()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=sorted(REGISTRIES), help="which registry to list")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"registered {args.kind}", show_lines=False)
    table.add_column("name", style="bold")
    table.add_column("description")
    for name, doc in rows(args.kind):
        table.add_row(name, doc)
    Console().print(table)
    return 0
