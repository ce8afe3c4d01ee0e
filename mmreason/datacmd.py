"""`mmreason data PACK ...`: a task pack's data tools (synthetic generators, converters).

A pack offers them in ``tasks/<pack>/cli.py`` with ``add_arguments(parser)`` and ``run(args)``; a module that sets
``DATA_COMMAND`` is reached under that name instead of the pack's (the generic pack's ``mmreason data inspect``).
``mmreason data examples`` writes every pack's example layouts (``mmreason/examples.py``).
"""

from __future__ import annotations

import argparse
import importlib

from mmreason import examples
from mmreason.registry import pack_modules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pack", required=True, metavar="PACK")
    p = sub.add_parser("examples", help="write a few rows in every published layout the packs read (drawn media)")
    p.set_defaults(_data_module=examples.__name__)
    examples.add_arguments(p)
    for pack, module in sorted(pack_modules("cli").items()):
        mod = importlib.import_module(module)
        name = getattr(mod, "DATA_COMMAND", pack)
        p = sub.add_parser(name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else None)
        p.set_defaults(_data_module=module)
        mod.add_arguments(p)


def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args._data_module).run(args) or 0)
