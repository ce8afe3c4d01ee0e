"""`mmreason list KIND`: what a registry holds, one line each, with the provenance of each method.

Methods (estimators, losses, aggregations, KL estimators, samplers, rollouts) print where their formula comes
from (``mmreason.registry.PROVENANCES``); each has a heading of its own in docs/methods/.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from mmreason.registry import Registry

# kind -> (module, attribute holding a Registry)
REGISTRIES = {
    "tasks": ("mmreason.taskpack", "TASKS"),
    "rewards": ("mmreason.rewarding", "REWARDS"),
    "estimators": ("mmreason.rl", "ESTIMATORS"),
    "losses": ("mmreason.rl", "POLICY_LOSSES"),
    "aggregations": ("mmreason.rl.registries", "AGGREGATIONS"),
    "kl": ("mmreason.rl.registries", "KL_ESTIMATORS"),
    "samplers": ("mmreason.sampling", "SAMPLERS"),
    "rollouts": ("mmreason.sampling", "WITHIN_STEP"),
}


# the kinds whose entries are methods with a provenance (tasks and rewards have none)
METHOD_KINDS = ("estimators", "losses", "aggregations", "kl", "samplers", "rollouts")


def _registry(kind: str) -> Registry[Any]:
    module, attr = REGISTRIES[kind]
    return getattr(importlib.import_module(module), attr)


def rows(kind: str) -> list[tuple[str, str]]:
    """Return (name, one-line description) for every entry of the registry ``kind``."""
    return _registry(kind).describe()


def provenances(kind: str) -> dict[str, str]:
    """Return name -> provenance for every entry of the registry ``kind`` ("" where none was stated)."""
    registry = _registry(kind)
    return {name: registry.provenance(name) for name in registry.names()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", choices=sorted(REGISTRIES), help="which registry to list")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"registered {args.kind}", show_lines=False)
    method = args.kind in METHOD_KINDS
    table.add_column("name", style="bold")
    if method:
        table.add_column("provenance")
    table.add_column("description")
    sources = provenances(args.kind) if method else {}
    for name, doc in rows(args.kind):
        table.add_row(name, sources.get(name) or "?", doc) if method else table.add_row(name, doc)
    Console().print(table)
    return 0
