"""`mmreason eval baseline --task PACK`: a pack's model-free baseline, scored as the harness scores a model.

The rule is the pack's (``TaskPack.baseline``): fitted on the pack's training samples, it writes a completion
for each held-out sample without seeing its media (DocSeeker: cite the most frequent gold page and give the
most frequent answer; MedScope: the train majority answer and mean window of the question; MRAG: the most
frequent gold route at each step; vision: the majority answer of the question's template). Every metric of
the pack scores those completions; ``--samples`` writes the per-doc records in the samples-file shape, so
``mmreason eval paired`` compares the baseline with a model doc by doc.

    mmreason eval baseline --task docseeker --train TRAIN.jsonl --data HELD_OUT.jsonl --samples baseline.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from mmreason.config import parse_override
from mmreason.eval.metrics import aggregate
from mmreason.eval.tasks import load_task
from mmreason.taskpack import TASKS


def score_baseline(
    pack_name: str,
    train: str | None,
    data: str | None,
    options: dict[str, Any] | None = None,
    limit: float | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the mean of every pack metric over the held-out docs, with ``n`` and ``n_train``; per-doc records).

    A metric that does not apply to a doc (NaN) is left out of that metric's mean (None when it applies to none).
    """
    pack = TASKS.get(pack_name)
    if pack.baseline is None:
        with_rule = ", ".join(n for n in TASKS.names() if TASKS.get(n).baseline is not None)
        raise ValueError(f"task pack {pack_name!r} has no baseline rule (packs with one: {with_rule})")
    options = dict(options or {})
    train_samples = pack.load_split(train, "train", options, key="--task-arg")
    if not train_samples:
        raise ValueError(f"baseline: the train split of {pack_name!r} is empty ({train or 'built-in data'})")
    rule = pack.baseline(train_samples)
    task = load_task(pack_name, data, limit, options)
    records = []
    for sample in task.samples:
        response = rule(sample)
        scores = {name: float(fn(sample, response)) for name, fn in pack.metrics.items()}
        records.append(
            {
                "doc_id": sample.id,
                "response": response,
                "scores": {k: (None if math.isnan(v) else v) for k, v in scores.items()},
            }
        )
    means = {name: summary.value for name, summary in aggregate(records, list(pack.metrics)).items()}
    return {"task": pack_name, "n_train": len(train_samples), "n": len(records), **means}, records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", required=True, help="a task pack with a baseline rule")
    parser.add_argument("--train", default=None, help="the rows the rule is fitted on (default: the pack's own)")
    parser.add_argument("--data", default=None, help="the held-out rows it is scored on (default: the pack's own)")
    parser.add_argument(
        "--task-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the pack's loader (YAML value), e.g. --task-arg source=easyvqa; repeatable",
    )
    parser.add_argument("--limit", type=float, default=None, help="first N held-out docs (< 1: a fraction)")
    parser.add_argument("--samples", default=None, help="write its per-doc records here (samples-file shape)")


def run(args: argparse.Namespace) -> int:
    options = {".".join(key): value for key, value in map(parse_override, args.task_arg)}
    summary, records = score_baseline(args.task, args.train, args.data, options, args.limit)
    if args.samples:
        Path(args.samples).write_text("".join(json.dumps(r) + "\n" for r in records))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
    return 0
