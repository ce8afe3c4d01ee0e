"""Prompt-GDRO: a multiplicative-weights bandit over pass@k difficulty bins that up-weights bins that stay hard.

Source: "Group Distributionally Robust Optimization-Driven RL for LLM Reasoning" (Panaganti et al., arXiv
2601.19280); our reading of its abstract, docs/methods/samplers.md#gdro. Per prompt x the sampler keeps an EMA pass rate
``p_x`` of its rollouts (reward >= ``success_threshold``) and classifies it online by ``pass@k = 1 - (1 - p_x)^k``
into the bins cut at ``edges`` (bin 0 the hardest); prompts never seen form one more bin. Per bin b::

    loss_b  <- beta loss_b + (1 - beta) mean failure rate of the rows drawn from b this step;   L_b = loss_b / (1 - beta^t_b)
    log w_b <- log w_b + step_size * L_b                              (multiplicative weights: a bin that stays hard grows)
    P(b)    = (1 - explore) softmax(log w)_b + explore / B            over the B non-empty bins

then each of the n draws picks a bin by P and a prompt uniformly within it (seeded: a resumed run draws the same).
What is the paper's: the online pass@k classifier, the multiplicative-weights bandit that up-weights groups that
stay hard, debiased with an EMA. What is ours: the bin edges, k, the EMA rate and its Adam-style bias correction,
the step size, the exploration floor, the bin of unseen prompts, and crediting a step's failures to the bin each
prompt was drawn from.

Rollout-GDRO (``rollout_allocation: true``): a shadow price ``lambda`` of one rollout turns each drawn prompt's
reward spread into its group size, ``n_x = clamp(round(sqrt(p_x (1 - p_x)) / lambda), n_min, n_max)`` (the square-root,
variance-optimal target), and moves after every draw, ``lambda *= exp(price_step (mean n - G) / G)``, so groups
of different sizes keep a mean budget of ``G = rollout.num_generations`` over the steps. What is the paper's: the
shadow-price controller, the fixed mean budget, the square-root rule. What is ours: the multiplicative price
update and its step, the bounds, the 0.05 floor, 1/2 for unseen prompts. The trainer asks ``generations`` for
the sizes (HF single-turn generation on one process; refused otherwise at start-up).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from mmreason.sampling.base import BaseSampler


class GDROSampler(BaseSampler):
    """GDRO (arXiv 2601.19280, reading): a bandit over online pass@k difficulty bins; Rollout-GDRO sizes the groups."""

    def __init__(
        self,
        size: int,
        seed: int = 0,
        *,
        k: int = 4,
        edges: Sequence[float] = (0.2, 0.5, 0.8),
        ema: float = 0.9,
        step_size: float = 0.5,
        explore: float = 0.1,
        success_threshold: float = 1.0,
        pass_momentum: float = 0.5,
        rollout_allocation: bool = False,
        n_min: int = 2,
        n_max: int = 16,
        price_step: float = 0.5,
    ) -> None:
        if size <= 0:
            raise ValueError("the training set is empty: no prompt to sample")
        if k < 1 or not 0 <= ema < 1 or step_size < 0 or not 0 <= explore <= 1 or not 0 <= pass_momentum < 1:
            raise ValueError(
                "gdro: need k >= 1, 0 <= ema < 1, step_size >= 0, 0 <= explore <= 1, 0 <= pass_momentum < 1"
            )
        if list(edges) != sorted(edges) or any(not 0 < e < 1 for e in edges):
            raise ValueError(f"gdro: edges must be increasing and inside (0, 1), got {list(edges)}")
        self.size, self.seed, self.k, self.edges = size, seed, k, [float(e) for e in edges]
        self.ema, self.step_size, self.explore = ema, step_size, explore
        self.success_threshold, self.pass_momentum = success_threshold, pass_momentum
        self.bins = len(self.edges) + 2  # the pass@k bins, then the unseen prompts
        self.pass_rate: dict[int, float] = {}
        self.log_w = [0.0] * self.bins
        self.loss = [0.0] * self.bins
        self.updates = [0] * self.bins
        self.draws = 0
        if rollout_allocation and not 1 <= n_min <= n_max:
            raise ValueError(f"gdro: need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.rollout_allocation, self.n_min, self.n_max, self.price_step = rollout_allocation, n_min, n_max, price_step
        self.sizes_groups = rollout_allocation  # the trainer asks ``generations`` for group sizes
        self.price: float | None = None  # the shadow price of one rollout; set from the budget on first use

    def bin_of(self, index: int) -> int:
        """The prompt's bin: 0 (hardest) .. len(edges) by pass@k, len(edges) + 1 when never seen."""
        if index not in self.pass_rate:
            return self.bins - 1
        pass_k = 1 - (1 - self.pass_rate[index]) ** self.k
        return sum(pass_k >= e for e in self.edges)

    def probabilities(self) -> list[float]:
        """P(bin) over the non-empty bins (0 for empty ones)."""
        members = [0] * self.bins
        for i in range(self.size):
            members[self.bin_of(i)] += 1
        live = [b for b in range(self.bins) if members[b]]
        top = max(self.log_w[b] for b in live)
        z = {b: math.exp(self.log_w[b] - top) for b in live}
        total = sum(z.values())
        return [
            (1 - self.explore) * z[b] / total + self.explore / len(live) if b in z else 0.0 for b in range(self.bins)
        ]

    def next_indices(self, n: int) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 7_919 + self.draws * 104_729 + 3)
        self.draws += 1
        by_bin: list[list[int]] = [[] for _ in range(self.bins)]
        for i in range(self.size):
            by_bin[self.bin_of(i)].append(i)
        bins = torch.multinomial(torch.tensor(self.probabilities()), n, replacement=True, generator=g).tolist()
        return [by_bin[b][int(torch.randint(len(by_bin[b]), (1,), generator=g))] for b in bins]

    def generations(self, indices: list[int], budget: int) -> list[int] | None:
        """Rollout-GDRO: rollouts per drawn prompt, ``clamp(round(sqrt(p(1 - p)) / price), n_min, n_max)`` (p = its
        pass rate, 1/2 unseen; sqrt(p(1 - p)) floored at 0.05); then the price moves by
        ``price *= exp(price_step (mean n - budget) / budget)``, so the mean over steps is held at ``budget``.
        None when the allocation is off (every prompt gets ``budget``)."""
        if not self.rollout_allocation:
            return None
        if self.price is None:
            self.price = 0.5 / budget  # an unseen prompt (sqrt(1/4) = 1/2) gets the budget
        spread = [max(0.05, math.sqrt(p * (1 - p))) for p in (self.pass_rate.get(int(i), 0.5) for i in indices)]
        counts = [min(self.n_max, max(self.n_min, round(s / self.price))) for s in spread]
        mean = sum(counts) / max(1, len(counts))
        self.price *= math.exp(self.price_step * (mean - budget) / budget)
        return counts

    def observe(
        self,
        indices: list[int],
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        completions: Sequence[str] | None = None,
    ) -> None:
        """One step's rollouts: ``rewards [N]`` and ``group_ids [N]`` (the dataset index of each row)."""
        r = torch.as_tensor(rewards, dtype=torch.float64).reshape(-1)
        g = torch.as_tensor(group_ids).reshape(-1).tolist()
        if len(g) != r.numel():
            raise ValueError(f"observe: rewards ({r.numel()}) and group_ids ({len(g)}) must align")
        failures: dict[int, list[float]] = {}
        for index in dict.fromkeys(int(i) for i in g):
            rows = [r[k].item() for k, gid in enumerate(g) if gid == index and not math.isnan(r[k].item())]
            if not rows:
                continue
            rate = sum(x >= self.success_threshold for x in rows) / len(rows)
            failures.setdefault(self.bin_of(index), []).append(1 - rate)  # credited to the bin it was drawn from
            old = self.pass_rate.get(index)
            self.pass_rate[index] = rate if old is None else self.pass_momentum * old + (1 - self.pass_momentum) * rate
        for b, values in failures.items():
            self.updates[b] += 1
            self.loss[b] = self.ema * self.loss[b] + (1 - self.ema) * sum(values) / len(values)
            debiased = self.loss[b] / (1 - self.ema ** self.updates[b])
            self.log_w[b] += self.step_size * debiased

    def state_dict(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "draws": self.draws,
            "price": self.price,
            "log_w": list(self.log_w),
            "loss": list(self.loss),
            "updates": list(self.updates),
            "pass_rate": [[i, v] for i, v in sorted(self.pass_rate.items())],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["size"]) != self.size:
            raise ValueError(f"GDRO checkpoint is for a dataset of {state['size']} prompts, this one has {self.size}")
        self.draws = int(state["draws"])
        self.price = None if state.get("price") is None else float(state["price"])
        self.log_w = [float(v) for v in state["log_w"]]
        self.loss = [float(v) for v in state["loss"]]
        self.updates = [int(v) for v in state["updates"]]
        self.pass_rate = {int(i): float(v) for i, v in state["pass_rate"]}
