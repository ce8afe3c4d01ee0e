"""Vision pack data tools: write synthetic items, convert easy-VQA to JSONL (the text-only baseline is
``mmreason eval baseline --task vision``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mmreason.tasks.vision.easyvqa import easyvqa_rows
from mmreason.tasks.vision.synth import generate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tool", required=True)
    p = sub.add_parser("synthetic", help="write N generated items (images + data.jsonl) to OUT")
    p.add_argument("out")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=int, default=112, help="image side in pixels")
    p.add_argument("--kinds", default="counting,colour,chart,geometry")
    p = sub.add_parser("easyvqa", help="write an easy-VQA split as JSONL (images stay in the installed package)")
    p.add_argument("out", help="output .jsonl file")
    p.add_argument("--split", default="train", choices=["train", "test"])


def run(args: argparse.Namespace) -> int:
    if args.tool == "synthetic":
        path = generate(args.out, args.n, args.seed, args.size, [k.strip() for k in args.kinds.split(",")])
        print(f"wrote {args.n} items: {path}")
    else:
        rows = easyvqa_rows(args.split)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"wrote {len(rows)} rows: {args.out}")
    return 0
