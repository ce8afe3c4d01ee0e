"""`mmreason data inspect PATH`: the generic pack's view of a dataset (format, columns, media, answer kinds, one
rendered prompt, every problem); exit 1 when there is a problem.

The tools not loaded with the pack are imported inside ``run``, for ``mmreason data``'s start-up (mmreason/cli.py).
"""

from __future__ import annotations

import argparse
import json

DATA_COMMAND = "inspect"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        help="a .jsonl / .json / .parquet file, a folder of shards, a glob, a save_to_disk folder or an imagefolder",
    )
    parser.add_argument("--format", default=None, help="force a row format (easyr1, trl, verl, videor1, sharegpt)")
    parser.add_argument("--columns", default=None, help="rename columns by role, YAML: '{prompt: question}'")
    parser.add_argument("--prompt-template", default="plain", help="plain | think_boxed | think_answer | FILE.jinja")
    parser.add_argument(
        "--model",
        default=None,
        help="render the prompt with this model's chat template (default: the built-in Qwen2.5-VL template)",
    )
    parser.add_argument("--limit", type=int, default=None, help="inspect the first N rows only")
    parser.add_argument("--no-decode", action="store_true", help="check that image files exist, do not open them")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run(args: argparse.Namespace) -> int:
    import yaml

    from mmreason.tasks.generic.inspection import inspect_dataset, render
    from mmreason.terminal import printable

    columns = yaml.safe_load(args.columns) if args.columns else None
    processor = None
    if args.model:
        from mmreason.models.loading import load_processor

        processor = load_processor(args.model)
    try:
        report = inspect_dataset(
            args.path,
            format=args.format,
            columns=columns,
            prompt_template=args.prompt_template,
            limit=args.limit,
            decode=not args.no_decode,
            processor=processor,
        )
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {printable(err)}")
        return 1
    # row text, paths and problems come from the user's files: escape what a terminal would act on
    print(json.dumps(report, indent=1, default=str) if args.json else printable(render(report)))
    return 1 if report["problems"] else 0
