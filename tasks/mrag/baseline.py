"""The MRAG baseline rule (``mmreason eval baseline --task mrag``): a rule that reads neither the question nor
the knowledge bases. At step k it takes the train samples' most frequent gold decision at step k (a knowledge
base, or answering); the pack's metrics score it, ``routing_accuracy`` and ``routing_accuracy_step{k}`` among
them. Compare two runs step by step with ``mmreason eval paired --metric routing_accuracy``.

    mmreason eval baseline --task mrag --train data/mrag_learn/train.jsonl --data data/mrag_learn/eval.jsonl
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable

from mmreason.tasks.mrag.scoring import gold_decision
from mmreason.types import Sample


def position_rule(train: list[Sample]) -> dict[int, str]:
    """Step index -> the most frequent gold decision of the unrolled train steps at that index."""
    by_step: dict[int, Counter] = defaultdict(Counter)
    for s in train:
        gold = gold_decision(s)
        if gold is not None:
            by_step[int(s.meta.get("step_index", 0))][gold] += 1
    if not by_step:
        raise ValueError("mrag baseline: no unrolled train step has a gold decision (task_args unrolled: true)")
    return {k: c.most_common(1)[0][0] for k, c in by_step.items()}


def step_text(decision: str) -> str:
    """A step that makes ``decision``: answer (empty), or ask one knowledge base a placeholder sub-question."""
    if decision == "answer":
        return "<think>position baseline</think><answer></answer>"
    return f"<think>position baseline</think><sub-question>?</sub-question><ret>{decision}</ret>"


def baseline_rule(train: list[Sample]) -> Callable[[Sample], str]:
    """The train majority decision at the sample's step index (answering at an index no train step reached)."""
    rule = position_rule(train)
    return lambda sample: step_text(rule.get(int(sample.meta.get("step_index", 0)), "answer"))
