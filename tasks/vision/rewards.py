"""The vision pack's rewards: the default list (``REWARDS``: ``scoring.vision_accuracy``, the eval metric's rule)
and its own reward ``skip_think``, TON's skip-think diagnostic (registered under that name when the
pack's rewards load; ``configs/vision/ton_grpo.yaml`` logs it with weight 0), and ``skip_ratio``, the same count
over a list of completions, which the pack's ``skip_think`` eval metric reports. Source: TON ("Think or Not?",
arXiv 2505.16854); docs/methods/packs.md#ton."""

from __future__ import annotations

from mmreason.parsing import MAX_CHARS, as_text
from mmreason.rewarding import per_sample, reward

REWARDS = [{"name": "mmreason.tasks.vision.scoring:vision_accuracy", "weight": 1.0}]


def skip_ratio(completions: list[str]) -> float:
    """Fraction of completions whose (first) think body is whitespace only: TON's skip-think ratio."""
    if not completions:
        return 0.0
    return sum(_skipped(as_text(c)) for c in completions) / len(completions)


def _skipped(text: str) -> bool:
    text = text[:MAX_CHARS]
    start = text.find("<think>")
    end = text.find("</think>", start + 7) if start >= 0 else -1
    return start >= 0 and end >= 0 and not text[start + 7 : end].strip()


@reward("skip_think")
@per_sample
def skip_think(sample, trajectory) -> float:
    """1 if the think block is empty or whitespace (TON's skip-think; log it with weight 0)."""
    return float(_skipped(as_text(trajectory.completion_text)))
