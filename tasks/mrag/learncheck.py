"""Learning-check figures of the mrag pack from `mmreason eval --log_samples` files of unrolled step samples.

``paired(a, b)``: routing accuracy of A and B on the steps both scored, per step, with the share of outputs
that parse as a step and the accuracy among those (a step that does not parse is a wrong route), and the paired
counts (``mmreason.eval.paired.mcnemar``): steps that turn right from A to B (up), turn wrong (down), McNemar's z.
``position_baseline(train, held_out)``: routing accuracy of a rule that reads neither the question nor the
knowledge bases: at step k it takes the train rows' most frequent gold decision at step k.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from mmreason.eval.paired import mcnemar
from mmreason.tasks.mrag.data import read_rows
from mmreason.tasks.mrag.metrics import decision


def _scored(path: str | Path) -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return {r["doc_id"]: r for r in rows if r.get("scores", {}).get("routing_accuracy") is not None}


def _step(doc_id: str) -> int:
    return int(doc_id.rsplit("#s", 1)[1]) + 1 if "#s" in doc_id else 0


def _summary(rows: list[dict[str, Any]]) -> dict[str, float]:
    right = [r["scores"]["routing_accuracy"] for r in rows]
    parsed = [r for r in rows if decision(r.get("response", "")) is not None]
    return {"n": len(rows), "routing": sum(right) / len(rows), "parsed": len(parsed) / len(rows),
            "routing_if_parsed": (sum(r["scores"]["routing_accuracy"] for r in parsed) / len(parsed)
                                  if parsed else math.nan)}


def paired(a: str | Path, b: str | Path) -> dict[str, Any]:
    sa, sb = _scored(a), _scored(b)
    ids = sorted(set(sa) & set(sb))
    if not ids:
        raise ValueError("paired: no step has a routing_accuracy score in both files")
    out: dict[str, Any] = {"n": len(ids)}
    for name, runs in (("a", sa), ("b", sb)):
        steps = sorted({_step(i) for i in ids})
        out[name] = {"all": _summary([runs[i] for i in ids]),
                     **{f"step{k}": _summary([runs[i] for i in ids if _step(i) == k]) for k in steps}}
    up, down, z = mcnemar([sa[i]["scores"]["routing_accuracy"] for i in ids],
                          [sb[i]["scores"]["routing_accuracy"] for i in ids])
    out.update(up=up, down=down, mcnemar_z=z)
    return out


def _route(row: dict[str, Any]) -> list[str]:
    return [str(s["kb"]) for s in row.get("steps") or []] + ["answer"]


def position_baseline(train: str | Path, held_out: str | Path) -> dict[str, Any]:
    by_step: dict[int, Counter] = defaultdict(Counter)
    for row in read_rows(train):
        for k, d in enumerate(_route(row)):
            by_step[k][d] += 1
    rule = {k: c.most_common(1)[0][0] for k, c in by_step.items()}
    hits: dict[int, list[bool]] = defaultdict(list)
    for row in read_rows(held_out):
        for k, d in enumerate(_route(row)):
            hits[k].append(rule.get(k) == d)
    every = [h for v in hits.values() for h in v]
    return {"rule": {f"step{k + 1}": d for k, d in sorted(rule.items())}, "n": len(every),
            "routing": sum(every) / len(every),
            **{f"routing_step{k + 1}": sum(v) / len(v) for k, v in sorted(hits.items())}}
