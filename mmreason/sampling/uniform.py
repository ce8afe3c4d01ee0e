"""Uniform sampling without replacement: a seeded permutation per epoch, position persisted."""

from __future__ import annotations

from typing import Any

import torch

from mmreason.sampling.base import BaseSampler


class UniformSampler(BaseSampler):
    """Walks seeded random permutations of ``range(size)``; epoch e uses seed (seed, e)."""

    def __init__(self, size: int, seed: int = 0) -> None:
        if size <= 0:
            raise ValueError("the training set is empty: no prompt to sample")
        self.size, self.seed = size, seed
        self.epoch, self.position = 0, 0

    def _order(self) -> list[int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(self.size, generator=g).tolist()

    def next_indices(self, n: int) -> list[int]:
        out: list[int] = []
        order = self._order()
        while len(out) < n:
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                order = self._order()
            take = min(n - len(out), self.size - self.position)
            out.extend(order[self.position : self.position + take])
            self.position += take
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "size": self.size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
