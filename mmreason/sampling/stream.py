"""The sampler of a streamed dataset (``data.streaming: true``): rows in stream order, the position kept.

A streaming loader returns a dataset with ``start(seed=, position=)`` whose item k is the k-th row of its seeded,
buffer-shuffled stream (epoch k // len). This sampler draws k = position, position + 1, ...; its state is the
position, saved in every checkpoint, so ``resume=auto`` reopens the stream at the next row not yet drawn.
"""

from __future__ import annotations

from typing import Any

from mmreason.sampling.base import BaseSampler


class StreamSampler(BaseSampler):
    def __init__(self, dataset: Any, seed: int = 0) -> None:
        if not hasattr(dataset, "start"):
            raise ValueError("data.streaming: the task's loader returned a dataset that cannot stream (no start())")
        if len(dataset) <= 0:
            raise ValueError("the training stream is empty: no prompt to sample")
        self.dataset, self.seed, self.position = dataset, seed, 0
        self._trial = False
        dataset.start(seed=seed, position=0)

    def __deepcopy__(self, memo: dict) -> StreamSampler:
        """A trial copy for resume's check-before-apply: it shares the dataset (an open stream cannot be copied)
        and its ``load_state_dict`` only validates the state, never reopening the shared stream."""
        clone = object.__new__(StreamSampler)
        clone.dataset, clone.seed, clone.position, clone._trial = self.dataset, self.seed, self.position, True
        return clone

    def next_indices(self, n: int) -> list[int]:
        out = list(range(self.position, self.position + n))
        self.position += n
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position, "seed": self.seed, "size": len(self.dataset), "stream": True}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state.get("stream"):
            raise ValueError("the checkpoint's sampler is not a stream's (it was saved with data.streaming off)")
        position = state["position"]
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"the checkpoint's stream position {position!r} is not a row count")
        self.position = position
        if not self._trial:
            self.dataset.start(seed=self.seed, position=self.position)
