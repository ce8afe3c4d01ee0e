"""`mmreason data PACK ...`: a task pack's data tools (synthetic generators, converters).

A pack offers them in ``tasks/<pack>/cli.py`` with ``add_arguments(parser)`` and ``run(args)``; a module that sets
``DATA_COMMAND`` is reached under that name instead of the pack's (the generic pack's ``mmreason data inspect``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil

import mmreason.tasks as packs


def _pack_clis() -> dict[str, str]:
    found = {}
    for info in pkgutil.iter_modules(packs.__path__):
        module = f"{packs.__name__}.{info.name}.cli"
        if info.ispkg and importlib.util.find_spec(module) is not None:
            found[info.name] = module
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pack", required=True, metavar="PACK")
    for pack, module in sorted(_pack_clis().items()):
        mod = importlib.import_module(module)
        name = getattr(mod, "DATA_COMMAND", pack)
        p = sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else None)
        p.set_defaults(_data_module=module)
        mod.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args._data_module).run(args) or 0)
