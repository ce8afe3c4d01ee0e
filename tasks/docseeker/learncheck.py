"""Figures of the DocSeeker learning check: a position baseline scored by the pack's own metrics, and
paired per-document comparisons of two `mmreason eval` samples files.

    mmreason data docseeker baseline --train TRAIN.jsonl --data HELD_OUT.jsonl [--samples OUT.jsonl]
    mmreason data docseeker paired A_samples.jsonl B_samples.jsonl [--metric evidence_f1 --metric accuracy]

The baseline cites the most frequent gold evidence page of the training rows and gives their most
frequent answer (ties go to the smaller page, the alphabetically first answer), in the ALR format, so every
metric of the pack scores it as it scores a model. ``--samples`` writes its per-doc records in the
harness's samples-file shape, so ``paired`` compares it with a model.

``paired``: over the docs both files scored, per metric, the mean of each, the docs that turn right
(A < 1 = B) and turn wrong (A = 1 > B), McNemar's z = (right - wrong) / sqrt(right + wrong), and a 95%
paired-bootstrap interval of the mean difference B - A (2,000 resamples, seed 0).
"""

from __future__ import annotations

import json
import math
import random
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


def paired(a: str | Path, b: str | Path, metric: str, resamples: int = 2000) -> dict[str, Any]:
    """Paired figures of ``metric`` between two samples files (docs both scored)."""
    sa = {r["doc_id"]: r["scores"].get(metric) for r in _rows(a) if "scores" in r}
    sb = {r["doc_id"]: r["scores"].get(metric) for r in _rows(b) if "scores" in r}
    ids = sorted(i for i in sa if i in sb and sa[i] is not None and sb[i] is not None)
    if not ids:
        raise ValueError(f"paired: no doc has a {metric} score in both files")
    x, y = [sa[i] for i in ids], [sb[i] for i in ids]
    right = sum(1 for p, q in zip(x, y) if p < 1 <= q)
    wrong = sum(1 for p, q in zip(x, y) if q < 1 <= p)
    diffs = [q - p for p, q in zip(x, y)]
    rng = random.Random(0)
    boots = sorted(sum(diffs[rng.randrange(len(diffs))] for _ in diffs) / len(diffs) for _ in range(resamples))
    return {"metric": metric, "n": len(ids), "a": sum(x) / len(x), "b": sum(y) / len(y),
            "diff": sum(diffs) / len(diffs), "ci95": [boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]],
            "turn_right": right, "turn_wrong": wrong,
            "mcnemar_z": (right - wrong) / math.sqrt(right + wrong) if right + wrong else 0.0}
