"""Figures of the DocSeeker learning check: a position baseline scored by the pack's own metrics, and
paired per-document comparisons of two `mmreason eval` samples files.

    mmreason data docseeker baseline --train TRAIN.jsonl --data HELD_OUT.jsonl [--samples OUT.jsonl]
    mmreason data docseeker paired A_samples.jsonl B_samples.jsonl [--metric evidence_f1 --metric accuracy]

The baseline cites the most frequent gold evidence page of the training rows and gives their most
frequent answer (ties go to the smaller page, the alphabetically first answer), in the ALR format, so every
metric of the pack scores it as it scores a model. ``--samples`` writes its per-doc records in the
harness's samples-file shape, so ``paired`` compares it with a model.

``paired``: ``mmreason eval paired --threshold 1`` (``mmreason.eval.paired``): per metric, the docs that turn
right (A < 1 = B) and wrong (A = 1 > B), McNemar's z and a bootstrap interval of B - A.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any


def _rows(path: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def position_baseline(train: str | Path) -> tuple[int, str]:
    """(the most frequent gold evidence page, the most frequent answer) of the training rows."""
    rows = _rows(train)
    if not rows:
        raise ValueError(f"baseline: {train} has no rows")
    pages = Counter(p for r in rows for p in (r.get("evidence_pages") or []) if p > 0)
    answers = Counter(str(r["answer"]) for r in rows)
    page = min(pages, key=lambda p: (-pages[p], p))
    answer = min(answers, key=lambda a: (-answers[a], a))
    return page, answer


def score_baseline(train: str | Path, data: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Mean of every pack metric for the baseline on ``data``, and its per-doc records."""
    from mmreason.tasks.docseeker.alr import alr_text
    from mmreason.tasks.docseeker.data import docseeker_load
    from mmreason.tasks.docseeker.metrics import docseeker_metrics

    page, answer = position_baseline(train)
    text = alr_text("Position baseline.", f"Page {page}.", "The most frequent answer.", [page], answer)
    metrics = docseeker_metrics()
    records = []
    for sample in docseeker_load(str(data), "eval", use_egra=False):
        scores = {name: fn(sample, text) for name, fn in metrics.items()}
        records.append({"doc_id": sample.id, "response": text,
                        "scores": {k: (None if math.isnan(v) else v) for k, v in scores.items()}})
    means = {}
    for name in metrics:
        values = [r["scores"][name] for r in records if r["scores"][name] is not None]
        means[name] = sum(values) / len(values) if values else None
    return {"cited_page": page, "answer": answer, "n": len(records), **means}, records
