"""Variance-Aware Sampling (VAS): draw prompts whose rollouts are likely to disagree.

Source: MMR1 (arXiv 2509.21268, section 3, Alg. 1) and its code ``LengSicong/MMR1``
(``verl/curriculum/metrics.py``, ``verl/curriculum/samplers.py``); docs/methods/samplers.md#vas.

Scores of a prompt x from the rewards r_1..r_N and completions y_1..y_N of N rollouts:

    OVS(x) = Var(r)                      = P(x)(1 - P(x)) when r is the 0/1 accuracy (P = pass rate)
    TDS(x) = 1 - SelfBLEU_123({y_i})     or distinct-n({y_i})
    VPS(x) = alpha * OVS(x) + beta * TDS(x)
    w      = (VPS - min VPS) / (max VPS - min VPS + 1e-8)   min-max over the scored prompts

A batch of B prompts holds ``floor(lambda * B)`` draws with replacement in proportion to ``w`` and
``B - floor(lambda * B)`` draws from a seeded permutation of every index (without replacement, wrapping
around; its position persists across refreshes and checkpoints); the two lists are interleaved.

Departures, marked [proposed] in docs/methods/samplers.md#vas: OVS is the population variance of whatever rewards the
sampler is given, which equals the paper's P(1 - P) exactly when they are the 0/1 accuracy (the trainer's
online feedback is the weighted total reward); TDS follows the paper (1 - self-BLEU, higher = more
diverse), not the code (raw self-BLEU with a positive weight). Prompts never scored take the highest
known VPS (``unseen="max"``, optimistic: every prompt is tried before it is ruled out) or the lowest
(``unseen="min"``). All weights equal (or none positive) falls back to uniform weights.

Refresh (``mode``):
  ``online``:   every step's training rollouts (``observe``) update the scores of the prompts drawn
                (EMA with ``momentum``; 0 = replace); the weights are rebuilt every ``update_every`` steps.
  ``rollouts``: the paper's schedule: before step 1 and every ``update_every`` steps the trainer rolls out
                ``refresh_indices()`` afresh and passes the per-prompt (rewards, completions) to
                ``refresh``; ``refresh_due(step)`` says when.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from mmreason.sampling.base import BaseSampler
from mmreason.sampling.uniform import UniformSampler

MODES = ("online", "rollouts")
DIVERSITY = ("self_bleu", "distinct")
UNSEEN = ("max", "min")


# ---- scores -------------------------------------------------------------------------------------


def outcome_variance(rewards: Sequence[float]) -> float:
    """OVS: population variance of a prompt's rollout rewards (P(1 - P) for 0/1 accuracy); 0 for N < 2."""
    r = [float(x) for x in rewards if x is not None and not math.isnan(float(x))]
    if len(r) < 2:
        return 0.0
    mean = sum(r) / len(r)
    return sum((x - mean) ** 2 for x in r) / len(r)


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu(
    hypothesis: Sequence[str], references: Sequence[Sequence[str]], max_order: int = 3, epsilon: float = 0.1
) -> float:
    """BLEU-1..max_order (uniform weights) of one tokenised hypothesis against references.

    As ``nltk.translate.bleu_score.sentence_bleu`` with ``SmoothingFunction().method1``: clipped n-gram
    precisions p_n = matched / max(1, hypothesis n-grams), a zero numerator replaced by ``epsilon``;
    0 when no unigram matches; brevity penalty exp(1 - r/c) against the closest reference length r
    (ties: the shorter) when the hypothesis length c < r.
    """
    c = len(hypothesis)
    if c == 0 or not references:
        return 0.0
    log_p = 0.0
    for n in range(1, max_order + 1):
        hyp = _ngrams(hypothesis, n)
        most: Counter = Counter()
        for ref in references:
            for gram, count in _ngrams(ref, n).items():
                most[gram] = max(most[gram], count)
        matched = sum(min(count, most[gram]) for gram, count in hyp.items())
        total = max(1, sum(hyp.values()))
        if n == 1 and matched == 0:
            return 0.0
        log_p += math.log((matched if matched else epsilon) / total) / max_order
    r = min((len(ref) for ref in references), key=lambda length: (abs(length - c), length))
    brevity = 1.0 if c > r else math.exp(1.0 - r / c)
    return brevity * math.exp(log_p)


def self_bleu(completions: Sequence[str], max_order: int = 3) -> float:
    """Mean BLEU-123 of each completion against the other N-1 (whitespace tokens); 0 for N < 2."""
    tokens = [str(c).split() for c in completions]
    if len(tokens) < 2:
        return 0.0
    scores = [sentence_bleu(t, tokens[:i] + tokens[i + 1 :], max_order) for i, t in enumerate(tokens)]
    return sum(scores) / len(scores)


def distinct_n(completions: Sequence[str], n: int = 3) -> float:
    """Unique n-grams / all n-grams over the completions (whitespace tokens); 0 without any n-gram."""
    grams: Counter = Counter()
    for c in completions:
        grams.update(_ngrams(str(c).split(), n))
    total = sum(grams.values())
    return len(grams) / total if total else 0.0


def trajectory_diversity(completions: Sequence[str], kind: str = "self_bleu", n: int = 3) -> float:
    """TDS: ``1 - self_bleu`` (identical rollouts give 0) or ``distinct_n``; 0 for fewer than 2 rollouts."""
    if kind not in DIVERSITY:
        raise ValueError(f"diversity must be one of {DIVERSITY}, got {kind!r}")
    if len(completions) < 2:
        return 0.0
    if kind == "self_bleu":
        return 1.0 - self_bleu(completions, max_order=n)
    return distinct_n(completions, n)


def minmax_weights(scores: torch.Tensor) -> torch.Tensor:
    """``[P]`` sampling weights (VPS - min) / (max - min + 1e-8); all ones when no weight is positive."""
    w = (scores - scores.min()) / (scores.max() - scores.min() + 1e-8)  # [P]
    return w if bool((w > 0).any()) else torch.ones_like(scores)


# ---- the sampler --------------------------------------------------------------------------------


class VASSampler(BaseSampler):
    """Mix of VPS-weighted draws (with replacement) and a uniform pass over the data (without).

    Args (``sampler.options`` in a config):
        size, seed: dataset size and run seed (given by the trainer).
        alpha, beta: VPS = alpha * OVS + beta * TDS (paper: 0.8, 0.2).
        mix: lambda, the weighted fraction of each batch (paper: 0.5).
        update_every: T, steps between weight rebuilds / fresh-rollout refreshes (paper: 35).
        mode: ``online`` | ``rollouts`` (see the module doc).
        momentum: EMA of a prompt's VPS across updates (0 = replace, the paper's default).
        diversity, diversity_n: ``self_bleu`` (TDS = 1 - SelfBLEU_1..n) | ``distinct`` (distinct-n).
        unseen: VPS of prompts never scored, ``max`` | ``min``.
        refresh_fraction: share of the dataset re-scored per fresh-rollout refresh (1.0 = all).
    """

    def __init__(
        self,
        size: int,
        seed: int = 0,
        *,
        alpha: float = 0.8,
        beta: float = 0.2,
        mix: float = 0.5,
        update_every: int = 35,
        mode: str = "online",
        momentum: float = 0.0,
        diversity: str = "self_bleu",
        diversity_n: int = 3,
        unseen: str = "max",
        refresh_fraction: float = 1.0,
    ) -> None:
        if size <= 0:
            raise ValueError("the training set is empty: no prompt to sample")
        if mode not in MODES:
            raise ValueError(f"sampler.options.mode must be one of {MODES}, got {mode!r}")
        if diversity not in DIVERSITY:
            raise ValueError(f"sampler.options.diversity must be one of {DIVERSITY}, got {diversity!r}")
        if unseen not in UNSEEN:
            raise ValueError(f"sampler.options.unseen must be one of {UNSEEN}, got {unseen!r}")
        if not 0.0 <= mix <= 1.0:
            raise ValueError(f"sampler.options.mix (lambda) must be in [0, 1], got {mix}")
        if update_every < 1:
            raise ValueError(f"sampler.options.update_every must be >= 1, got {update_every}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"sampler.options.momentum must be in [0, 1), got {momentum}")
        if not 0.0 < refresh_fraction <= 1.0:
            raise ValueError(f"sampler.options.refresh_fraction must be in (0, 1], got {refresh_fraction}")
        self.size, self.seed = size, seed
        self.alpha, self.beta, self.mix = alpha, beta, mix
        self.update_every, self.mode, self.momentum = update_every, mode, momentum
        self.diversity, self.diversity_n, self.unseen = diversity, diversity_n, unseen
        self.refresh_fraction = refresh_fraction
        self.uniform = UniformSampler(size, seed)  # the uniform pool (position persisted in checkpoints)
        self.draws = 0  # batches drawn: the weighted draws' generator is seeded by (seed, draws)
        self.observed = 0  # observe() calls (training steps) since the start
        self.refreshes = 0
        self.scores: dict[int, float] = {}  # live VPS per scored prompt
        self.snapshot: dict[int, float] = {}  # the VPS the current weights were built from
        self._weights = torch.ones(size)  # [P]

    # -- scores and weights --

    def vps(self, rewards: Sequence[float], completions: Sequence[str] | None = None) -> float:
        """VPS of one prompt from its rollouts' rewards (and completions; without them TDS counts 0)."""
        tds = trajectory_diversity(completions, self.diversity, self.diversity_n) if completions else 0.0
        return self.alpha * outcome_variance(rewards) + self.beta * tds

    def _update(self, index: int, value: float) -> None:
        old = self.scores.get(index)
        self.scores[index] = value if old is None else self.momentum * old + (1.0 - self.momentum) * value

    def rebuild_weights(self) -> None:
        """Weights from the current VPS table (the table is snapshotted: a checkpoint restores them)."""
        self.snapshot = dict(self.scores)
        self._weights = self._weights_from(self.snapshot)

    def _weights_from(self, table: dict[int, float]) -> torch.Tensor:
        if not table:
            return torch.ones(self.size)
        known = torch.tensor(list(table.values()), dtype=torch.float64)
        fill = float(known.max() if self.unseen == "max" else known.min())
        scores = torch.full((self.size,), fill, dtype=torch.float64)  # [P]
        scores[torch.tensor(list(table.keys()), dtype=torch.long)] = known
        return minmax_weights(scores).float()

    @property
    def weights(self) -> torch.Tensor:
        """``[P]`` the current weighted-draw weights (unnormalised)."""
        return self._weights

    # -- drawing --

    def next_indices(self, n: int) -> list[int]:
        """``floor(mix * n)`` weighted draws interleaved with ``n - floor(mix * n)`` uniform-pool draws."""
        n_weighted = math.floor(self.mix * n)
        g = torch.Generator().manual_seed(self.seed * 7_919 + self.draws * 104_729 + 1)
        self.draws += 1
        weighted = (
            torch.multinomial(self._weights, n_weighted, replacement=True, generator=g).tolist() if n_weighted else []
        )
        uniform = self.uniform.next_indices(n - n_weighted)
        out: list[int] = []
        for k in range(max(len(weighted), len(uniform))):
            out += weighted[k : k + 1] + uniform[k : k + 1]
        return out

    # -- feedback --

    def observe(
        self,
        indices: list[int],
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        completions: Sequence[str] | None = None,
    ) -> None:
        """One training step's rollouts: ``rewards [N]``, ``group_ids [N]`` (= dataset index of each row),
        optional ``completions`` (N texts, for TDS). Online mode updates the drawn prompts' VPS and rebuilds
        the weights every ``update_every`` steps; both modes count the step."""
        self.observed += 1
        if self.mode != "online":
            return
        r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)  # [N]
        g = torch.as_tensor(group_ids).reshape(-1).tolist()  # [N]
        if len(g) != r.numel() or (completions is not None and len(completions) != len(g)):
            raise ValueError(
                f"observe: rewards ({r.numel()}), group_ids ({len(g)}) and completions "
                f"({None if completions is None else len(completions)}) must align"
            )
        for index in dict.fromkeys(int(i) for i in g):
            rows = [k for k, gid in enumerate(g) if gid == index]
            texts = [completions[k] for k in rows] if completions is not None else None
            self._update(index, self.vps(r[rows].tolist(), texts))
        if self.observed % self.update_every == 0:
            self.rebuild_weights()

    def refresh_due(self, step: int) -> bool:
        """Whether the trainer should re-score prompts with fresh rollouts before ``step`` (1-based)."""
        return self.mode == "rollouts" and (step - 1) % self.update_every == 0

    def refresh_indices(self) -> list[int]:
        """The prompts to roll out afresh: all, or a seeded ``refresh_fraction`` subset (sorted)."""
        if self.refresh_fraction >= 1.0:
            return list(range(self.size))
        k = max(1, round(self.refresh_fraction * self.size))
        g = torch.Generator().manual_seed(self.seed * 31 + self.refreshes * 1_000_033 + 7)
        return sorted(torch.randperm(self.size, generator=g)[:k].tolist())

    def refresh(self, scores: Mapping[int, tuple[Sequence[float], Sequence[str]]]) -> None:
        """Fresh rollouts: ``{index: (rewards of N rollouts, their completions)}``; rescored prompts replace
        (or EMA-update) their VPS, the rest keep theirs; then the weights are rebuilt."""
        for index, (rewards, completions) in scores.items():
            if not 0 <= int(index) < self.size:
                raise IndexError(f"refresh: index {index} is outside the dataset (size {self.size})")
            self._update(int(index), self.vps(list(rewards), list(completions) if completions else None))
        self.refreshes += 1
        self.rebuild_weights()

    # -- checkpoints (JSON-serialisable: the trainer writes it into trainer_state.json) --

    def state_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "seed": self.seed,
            "epoch": self.uniform.epoch,
            "position": self.uniform.position,
            "draws": self.draws,
            "observed": self.observed,
            "refreshes": self.refreshes,
            "scores": [[i, v] for i, v in sorted(self.scores.items())],
            "snapshot": [[i, v] for i, v in sorted(self.snapshot.items())],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["size"]) != self.size:
            raise ValueError(f"VAS checkpoint is for a dataset of {state['size']} prompts, this one has {self.size}")
        self.uniform.load_state_dict(state)
        self.draws, self.observed = int(state["draws"]), int(state["observed"])
        self.refreshes = int(state["refreshes"])
        self.scores = {int(i): float(v) for i, v in state["scores"]}
        self.snapshot = {int(i): float(v) for i, v in state["snapshot"]}
        self._weights = self._weights_from(self.snapshot)
