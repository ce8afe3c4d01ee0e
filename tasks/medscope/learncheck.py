"""Learning-check figures of the MedScope pack, from rows and `mmreason eval --log_samples` files.

``blind_baseline(train, held_out)``: a rule that never looks at a video. For each question (its text and task
type) it answers the train rows' most frequent answer and, as the span, the mean of their first evidence
windows; the held-out rows are scored with the pack's own eval metrics (``scoring.METRICS``).
``paired A B``: ``mmreason eval paired`` (``mmreason.eval.paired``) on the pack's learning-check metrics.

    python -m mmreason.tasks.medscope.learncheck baseline TRAIN.jsonl HELD_OUT.jsonl [--samples OUT.jsonl]
    python -m mmreason.tasks.medscope.learncheck paired A_samples.jsonl B_samples.jsonl [--metric NAME ...]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from mmreason.eval.paired import compare_all, rounded
from mmreason.tasks.medscope.data import medscope_load
from mmreason.tasks.medscope.scoring import METRICS

PAIRED_METRICS = ("accuracy", "grounded_accuracy", "miou", "grounded_calls", "tool_calls")


def _key(sample) -> tuple[str, str]:
    return sample.meta["task_type"], sample.messages[0]["content"][-1]["text"].split("\n", 1)[0]


def blind_rule(train: str | Path) -> dict[tuple[str, str], tuple[str, tuple[float, float]]]:
    """(task type, question) -> (the most frequent train answer, the mean first evidence window)."""
    answers: dict[tuple[str, str], Counter] = defaultdict(Counter)
    windows: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
    for s in medscope_load(str(train)):
        answers[_key(s)][str(s.answer)] += 1
        windows[_key(s)].append(s.meta["span"][0])
    return {k: (answers[k].most_common(1)[0][0],
                (sum(w[0] for w in windows[k]) / len(windows[k]), sum(w[1] for w in windows[k]) / len(windows[k])))
            for k in answers}


def blind_completion(sample, rule) -> str:
    answer, (lo, hi) = rule.get(_key(sample), ("", (0.0, 0.0)))
    span = f"[{lo:.1f}, {hi:.1f}]"
    if sample.meta["answer_kind"] == "span":
        return f"<answer>{span}</answer>"
    return f"<span>{span}</span><answer>{answer}</answer>"


def _mean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def blind_baseline(train: str | Path, held_out: str | Path) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """The video-blind rule's metric means on ``held_out`` and its per-doc records (samples-file shape)."""
    rule = blind_rule(train)
    records = []
    for s in medscope_load(str(held_out)):
        completion = blind_completion(s, rule)
        records.append({"doc_id": s.id, "response": completion,
                        "scores": {name: fn(s, completion) for name, fn in METRICS.items()}})
    summary = {name: _mean([r["scores"][name] for r in records]) for name in METRICS}
    return {"n": len(records), **summary}, records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmreason.tasks.medscope.learncheck")
    sub = parser.add_subparsers(dest="command", required=True)
    base = sub.add_parser("baseline", help="the video-blind rule's metrics on held-out rows")
    base.add_argument("train")
    base.add_argument("held_out")
    base.add_argument("--samples", help="write its per-doc records here")
    pair = sub.add_parser("paired", help="A against B, per doc")
    pair.add_argument("a")
    pair.add_argument("b")
    pair.add_argument("--metric", action="append", choices=sorted(METRICS))
    args = parser.parse_args(argv)
    if args.command == "baseline":
        summary, records = blind_baseline(args.train, args.held_out)
        if args.samples:
            Path(args.samples).write_text("".join(json.dumps(r) + "\n" for r in records))
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in summary.items()}))
        return 0
    # unnamed metrics no doc has in both (grounded_calls against the blind rule, which calls nothing) are skipped
    for result in compare_all(args.a, args.b, args.metric or list(PAIRED_METRICS), skip_missing=not args.metric):
        print(json.dumps(rounded(result)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
