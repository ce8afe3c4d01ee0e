"""The MedScope baseline rule (``mmreason eval baseline --task medscope``): a rule that never looks at a video.

For each question (its text and task type) it answers the train samples' most frequent answer and, as the span,
the mean of their first evidence windows; the pack's own eval metrics (``scoring.METRICS``) score it. Compare it
with a model doc by doc with ``mmreason eval paired`` (a metric no doc has in both files, such as
``grounded_calls`` against this rule, which calls nothing, is reported as skipped).

    mmreason eval baseline --task medscope --train TRAIN.jsonl --data HELD_OUT.jsonl --samples blind.jsonl
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

from mmreason.types import Sample


def _key(sample) -> tuple[str, str]:
    return sample.meta["task_type"], sample.messages[0]["content"][-1]["text"].split("\n", 1)[0]


def blind_rule(train: list[Sample]) -> dict[tuple[str, str], tuple[str, tuple[float, float]]]:
    """(task type, question) -> (the most frequent train answer, the mean first evidence window)."""
    answers: dict[tuple[str, str], Counter] = defaultdict(Counter)
    windows: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
    for s in train:
        answers[_key(s)][str(s.answer)] += 1
        windows[_key(s)].append(s.meta["span"][0])
    return {
        k: (
            answers[k].most_common(1)[0][0],
            (sum(w[0] for w in windows[k]) / len(windows[k]), sum(w[1] for w in windows[k]) / len(windows[k])),
        )
        for k in answers
    }


def blind_completion(sample, rule) -> str:
    answer, (lo, hi) = rule.get(_key(sample), ("", (0.0, 0.0)))
    span = f"[{lo:.1f}, {hi:.1f}]"
    if sample.meta["answer_kind"] == "span":
        return f"<answer>{span}</answer>"
    return f"<span>{span}</span><answer>{answer}</answer>"


def baseline_rule(train: list[Sample]) -> Callable[[Sample], str]:
    """The video-blind completion of each held-out question (``blind_rule`` fitted on ``train``)."""
    rule = blind_rule(train)
    return lambda sample: blind_completion(sample, rule)
