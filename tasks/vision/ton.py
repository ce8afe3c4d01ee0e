"""TON ("Think or Not?", arXiv 2505.16854) stage 1: thought dropout on SFT targets.

With probability ``p`` (0.5 in the released SFT sets) an example's reasoning trace is replaced by the
empty thought, literally ``<think>\\n\\n</think>``, so the model learns that skipping is allowed; GRPO then
decides per question (the format reward accepts the empty thought). Source: ``kokolerk/TON``
``src/eval/aitz_evaluate/sft_grpo_data.py``; docs/methods/packs.md#ton.

Each example draws independently from a generator seeded by (seed, example id): the same example is
dropped (or kept) in every epoch and every run with that seed, whatever the data order.
"""

from __future__ import annotations

import random
from dataclasses import replace

from mmreason.types import Sample

EMPTY_THOUGHT = "<think>\n\n</think>"


def think_answer(trace: str, answer: str, answer_tag: str = "answer") -> str:
    """``<think>{trace}</think><answer>{answer}</answer>``; an empty (or blank) trace gives the empty thought."""
    think = EMPTY_THOUGHT if not str(trace).strip() else f"<think>{trace}</think>"
    return f"{think}<{answer_tag}>{answer}</{answer_tag}>"


def thought_dropout(
    trace: str, answer: str, rng: random.Random, p: float = 0.5, answer_tag: str = "answer"
) -> tuple[str, bool]:
    """(target text, dropped): the trace kept with probability 1 - p, else the empty thought.

    A trace that is already empty counts as dropped (no draw can restore it).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"thought_dropout: p must be in [0, 1], got {p}")
    dropped = rng.random() < p or not str(trace).strip()
    return think_answer("" if dropped else trace, answer, answer_tag), dropped


def apply_thought_dropout(samples: list[Sample], p: float = 0.5, seed: int = 0) -> list[Sample]:
    """Copies of ``samples`` whose ``meta["target"]`` is the TON target (trace from ``meta["trace"]``)
    and ``meta["thought_dropped"]`` says whether the thought was dropped."""
    out = []
    for s in samples:
        rng = random.Random(f"ton/{seed}/{s.id}")
        target, dropped = thought_dropout(str(s.meta.get("trace") or ""), str(s.answer), rng, p)
        out.append(replace(s, meta={**s.meta, "target": target, "thought_dropped": dropped}))
    return out
