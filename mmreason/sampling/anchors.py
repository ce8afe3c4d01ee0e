"""Anchors for all-fail groups: R³ replay of past successes (arXiv 2601.19620) or DaGRPO's reference (arXiv 2512.06337).

Sources (both abstract-only in the founding digest; readings, docs/algorithms.md §15.10):
"Replay, Reflection, and Ranking Rewards" (R³; Jiang et al., arXiv 2601.19620): when a group's advantages collapse,
good past trajectories of the same prompt are recalled into the group, their stored log-probs making an importance
weight possible. "Distinctiveness-Aware GRPO" (DaGRPO; Xie et al., arXiv 2512.06337): for hard prompts with no
positive sample, high-quality anchor responses are added (off-policy augmentation).

    all_fail(g)  = every total reward of group g <= threshold          (NaN rows ignored; an all-NaN group is not)
    source "replay":    the most recent stored success of the prompt (its completion tokens and, when the sampler
                        returned them, its log-probs: the trainer's truncated IS then weighs it, rollout_correction)
    source "reference": the pack's target text of the sample (as SFT trains on it), cut at max_completion_length
    the group's last rollout is replaced by the anchor (the group keeps its size); the anchor is scored like a rollout

``source: reflect`` is R³'s in-context reflection: an all-fail group is rolled out again with a past failure of the
prompt in its prompt (``mmreason/train/anchors.py``; the failures are kept in the same buffer).

This module holds the pure parts (the buffer, which groups need an anchor); ``mmreason/train/anchors.py`` runs
them inside a step. What is ours: replacing one rollout rather than adding one, the threshold, the buffer (the last
``buffer_size`` successes per prompt, kept in memory, not in checkpoints), single-turn episodes only, and no IS
weight for a reference answer (it has no behaviour log-probs). R³'s entropy-ranking reward is the ``r3_rank``
loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

SOURCES = ("replay", "reference", "reflect")


@dataclass
class StoredSuccess:
    """A past successful completion of one prompt: its tokens, text and (when the sampler gave them) log-probs."""

    token_ids: torch.Tensor  # [L] the completion tokens
    text: str
    logprobs: torch.Tensor | None = None  # [L] the sampler's log-probs of those tokens


def all_fail(totals: Sequence[float], threshold: float) -> bool:
    """True when every scored total is <= threshold (at least one scored; NaN rows are not scored)."""
    scored = [t for t in totals if not math.isnan(t)]
    return bool(scored) and all(t <= threshold for t in scored)


class AnchorBuffer:
    """The last ``size`` successes of each prompt (dataset index), newest last."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"anchor.buffer_size must be >= 1, got {size}")
        self.size = size
        self.items: dict[int, list[StoredSuccess]] = {}

    def add(self, index: int, success: StoredSuccess) -> None:
        kept = self.items.setdefault(int(index), [])
        kept.append(success)
        del kept[: -self.size]

    def latest(self, index: int) -> StoredSuccess | None:
        kept = self.items.get(int(index))
        return kept[-1] if kept else None

    def __len__(self) -> int:
        return sum(len(v) for v in self.items.values())
