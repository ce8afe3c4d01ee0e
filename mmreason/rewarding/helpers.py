"""Small helpers for writing rewards in the native convention."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mmreason.types import Sample, Trajectory

_MISSING = object()


def column(sample: Sample, key: str, default: Any = None) -> Any:
    """A sample's dataset column: ``answer`` or an entry of ``meta`` (``default`` when absent)."""
    if key == "answer":
        return sample.answer if sample.answer is not None else default
    value = sample.meta.get(key, _MISSING)
    return default if value is _MISSING or value is None else value


def per_sample(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ``fn(sample, trajectory, **kwargs) -> float | None | dict`` into a native batch reward.

    The batch function returns a list, or (when ``fn`` returns dicts) a dict of lists with None where
    a sample's dict lacks a key. Put ``@reward(...)`` above ``@per_sample``::

        @reward("answer_in_caption")
        @per_sample
        def answer_in_caption(sample, trajectory, *, case_sensitive=False):
            \"\"\"1 if the completion contains the reference answer.\"\"\"
            ...
    """

    @functools.wraps(fn)
    def batch(samples: list[Sample], trajectories: list[Trajectory], **kwargs: Any) -> Any:
        outs = [fn(s, t, **kwargs) for s, t in zip(samples, trajectories)]
        dicts = [o for o in outs if isinstance(o, dict)]
        if not dicts:
            return outs
        keys: dict[str, None] = {}
        for d in dicts:
            keys.update(dict.fromkeys(d))
        return {k: [o.get(k) if isinstance(o, dict) else None for o in outs] for k in keys}

    return batch
