"""`mmreason eval paired A B`: two models on the same docs, compared doc by doc.

Two runs over one held-out set differ on a few docs; a paired test counts those instead of comparing two means
with their own (much larger) errors. Over the docs both samples files (``mmreason eval --log_samples``) scored
on a metric, it reports the two means, the docs that go **up** from A to B and those that go **down**,
McNemar's (sign-test) ``z = (up - down) / sqrt(up + down)`` and a 95 % paired-bootstrap interval of the mean
difference B - A (2,000 resamples, seed 0). |z| > 1.96 is significant at 5 %.

``--threshold T`` counts a doc only when it crosses T (up: ``A < T <= B``; down: ``B < T <= A``): for a
partial-credit metric "became right" rather than "scored a little higher". Without it any change counts.

    mmreason eval paired A_samples.jsonl B_samples.jsonl --metric accuracy [--metric miou] [--threshold 1]
    mmreason eval paired eval_results/sft eval_results/grpo      # a folder: its newest samples file

Docs whose score is missing or NaN in either file (the metric does not apply to them) are left out; a metric
that no doc has in both files is an error naming it (reported as skipped when every metric is compared).
"""

from __future__ import annotations

import argparse
import json
import math
import random
from pathlib import Path
from typing import Any

from mmreason.paths import read_jsonl


def samples_file(path: str | Path) -> Path:
    """``path`` itself, or the newest ``*_samples_*.jsonl`` anywhere under a folder."""
    p = Path(path)
    if p.is_dir():
        found = sorted(p.rglob("*_samples_*.jsonl"), key=lambda f: f.name)
        if not found:
            raise FileNotFoundError(f"no *_samples_*.jsonl under {str(p)!r} (run mmreason eval with --log_samples)")
        return found[-1]
    if not p.is_file():
        raise FileNotFoundError(f"samples file {str(p)!r} does not exist")
    return p


def read_scores(path: str | Path) -> dict[str, dict[str, Any]]:
    """doc_id -> its scores, from a samples file (docs that failed have none and are left out)."""
    out = {}
    for row in read_jsonl(samples_file(path)):  # a line cut short by a kill: dropped, with a warning
        if row.get("scores") and "doc_id" in row:
            out[str(row["doc_id"])] = row["scores"]
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def score_pairs(
    a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]], metric: str
) -> list[tuple[str, float, float]]:
    """(doc_id, A's score, B's score) for every doc both scored on ``metric``, in doc order."""
    pairs = []
    for doc in sorted(set(a) & set(b)):
        x, y = _number(a[doc].get(metric)), _number(b[doc].get(metric))
        if x is not None and y is not None:
            pairs.append((doc, x, y))
    return pairs


def mcnemar(x: list[float], y: list[float], threshold: float | None = None) -> tuple[int, int, float]:
    """(up, down, z) from A's and B's scores of the same docs; ``threshold``: only crossings of it count."""
    if threshold is None:
        up, down = sum(p < q for p, q in zip(x, y)), sum(p > q for p, q in zip(x, y))
    else:
        up = sum(p < threshold <= q for p, q in zip(x, y))
        down = sum(q < threshold <= p for p, q in zip(x, y))
    return up, down, (up - down) / math.sqrt(up + down) if up + down else 0.0


def bootstrap_interval(diffs: list[float], resamples: int = 2000, seed: int = 0) -> list[float]:
    """95 % percentile interval of the mean of ``diffs`` under resampling docs with replacement."""
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(len(diffs))] for _ in diffs) / len(diffs) for _ in range(resamples))
    return [means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]]


def paired(a: str | Path | dict, b: str | Path | dict, metric: str, threshold: float | None = None) -> dict[str, Any]:
    """A against B on ``metric``: n, means, diff, ci95, up, down, mcnemar_z. ``a`` / ``b``: samples files,
    folders, or ``read_scores`` results."""
    sa = a if isinstance(a, dict) else read_scores(a)
    sb = b if isinstance(b, dict) else read_scores(b)
    pairs = score_pairs(sa, sb, metric)
    if not pairs:
        raise ValueError(f"paired: no doc has a {metric!r} score in both files")
    x, y = [p[1] for p in pairs], [p[2] for p in pairs]
    diffs = [q - p for p, q in zip(x, y)]
    up, down, z = mcnemar(x, y, threshold)
    return {
        "metric": metric,
        "n": len(pairs),
        "a": sum(x) / len(x),
        "b": sum(y) / len(y),
        "diff": sum(diffs) / len(diffs),
        "ci95": bootstrap_interval(diffs),
        "up": up,
        "down": down,
        "mcnemar_z": z,
        **({"threshold": threshold} if threshold is not None else {}),
    }


def compare_all(
    a: str | Path,
    b: str | Path,
    metrics: list[str] | None = None,
    threshold: float | None = None,
    skip_missing: bool | None = None,
) -> list[dict[str, Any]]:
    """One result per metric (default: every metric A's docs carry). A metric that no doc has in both files is
    reported as ``{"metric": M, "skipped": why}`` when ``skip_missing`` (default: when no ``metrics`` were
    named), else raised."""
    sa, sb = read_scores(a), read_scores(b)
    names = metrics or sorted({m for scores in sa.values() for m in scores})
    skip = not metrics if skip_missing is None else skip_missing
    results = []
    for metric in names:
        try:
            results.append(paired(sa, sb, metric, threshold))
        except ValueError as err:
            if not skip:
                raise
            results.append({"metric": metric, "skipped": str(err)})
    return results


def rounded(result: dict[str, Any]) -> dict[str, Any]:
    def r(v: Any) -> Any:
        return round(v, 4) if isinstance(v, float) else [r(x) for x in v] if isinstance(v, list) else v

    return {k: r(v) for k, v in result.items()}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # nargs=2 with a tuple metavar breaks argparse's help on a positional: two named positionals instead.
    parser.add_argument(
        "a", metavar="A", help="a samples file of `mmreason eval --log_samples` (or a folder: the newest inside)"
    )
    parser.add_argument("b", metavar="B", help="the samples file (or folder) to compare with A")
    parser.add_argument("--metric", action="append", help="metric(s) to compare (default: all A's docs carry)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="count a doc only when its score crosses this value (e.g. 1 for partial credit)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line per metric instead of a table")


def run(args: argparse.Namespace) -> int:
    results = compare_all(args.a, args.b, args.metric, args.threshold)
    if args.json:
        for result in results:
            print(json.dumps(rounded(result)))
        return 0
    print(f"A: {samples_file(args.a)}\nB: {samples_file(args.b)}")
    print(f"{'metric':<22}{'n':>6}{'A':>9}{'B':>9}{'B - A':>9}{'95% CI':>19}{'up':>6}{'down':>6}{'z':>7}")
    for r in results:
        if "skipped" in r:
            print(f"{r['metric']:<22}  skipped: {r['skipped']}")
            continue
        ci = f"[{r['ci95'][0]:+.3f}, {r['ci95'][1]:+.3f}]"
        print(
            f"{r['metric']:<22}{r['n']:>6}{r['a']:>9.4f}{r['b']:>9.4f}{r['diff']:>+9.4f}{ci:>19}"
            f"{r['up']:>6}{r['down']:>6}{r['mcnemar_z']:>7.2f}"
        )
    return 0
