"""The records of reward scoring: a configured reward (``RewardSpec``), one failed call (``ErrorRecord``) and
a batch's scores (``RewardBatch``, values ``[N, K]`` with NaN where a column does not apply)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mmreason.rl.groups import weighted_total
from mmreason.types import Sample, Trajectory


class RewardErrorLimitExceeded(RuntimeError):
    """More reward calls failed in this run than ``max_reward_errors`` allows."""


@dataclass
class RewardSpec:
    """One configured reward.

    name:   the column name (and the registered name when ``ref`` is None); unique within a run.
    ref:    a registered name, ``"pkg.module:function"``, ``"path/file.py:function"`` or a callable.
    weight: a number, or ``{sub-score key: weight}`` for a dict-returning reward.
    kwargs: passed to the function on every call (thresholds, tolerances, ...).
    trl_format: ``"text"`` or ``"conversational"`` prompts/completions for TRL-style functions.
    isolation: ``"process"`` (a killable worker: the default for rewards named by reference), ``"thread"``
        (the default for built-in rewards, and for rewards that hold a model) or ``"auto"``.
    """

    name: str
    ref: str | Callable[..., Any] | None = None
    weight: float | dict[str, float] = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)
    trl_format: str = "text"
    isolation: str = "auto"


@dataclass(frozen=True)
class ErrorRecord:
    """One failed reward call on one sample. kind: "exception" | "timeout" | "output"."""

    reward: str
    sample_id: str
    index: int
    kind: str
    message: str


@dataclass
class RewardBatch:
    """The rewards of N trajectories.

    values:  [N, K] fp32; NaN where a component does not apply (or failed with ``on_error="none"``).
    names:   K column names.
    weights: [K] fp32, from the config.
    errors:  the failed calls of this batch.
    """

    values: torch.Tensor
    names: list[str]
    weights: torch.Tensor
    errors: list[ErrorRecord] = field(default_factory=list)

    @classmethod
    def concat(cls, batches: list[RewardBatch]) -> RewardBatch:
        """Rows of several batches of one run, columns aligned by name (NaN where a batch lacks one; the
        runner's columns only grow, so the last batch names them all)."""
        last = batches[-1]
        rows = []
        for b in batches:
            index = {n: k for k, n in enumerate(b.names)}
            cols = [
                b.values[:, index[n]] if n in index else torch.full((b.values.shape[0],), float("nan"))
                for n in last.names
            ]
            rows.append(torch.stack(cols, dim=1) if cols else b.values)
        return cls(torch.cat(rows, dim=0), list(last.names), last.weights, [e for b in batches for e in b.errors])

    def take(self, rows: list[int]) -> RewardBatch:
        """The batch restricted to ``rows`` (its error records kept as they are)."""
        return RewardBatch(self.values[rows], self.names, self.weights, self.errors)

    def column(self, name: str) -> torch.Tensor:
        """The ``[N]`` values of one column."""
        return self.values[:, self.names.index(name)]

    def total(self, missing: str = "zero") -> torch.Tensor:
        """Weighted sum ``[N]``; ``missing`` (``zero`` | ``renormalize``) as ``mmreason.rl.weighted_total``,
        the same total the advantage estimators score."""

        return weighted_total(self.values, self.weights, missing)[0]

    def means(self, prefix: str = "rewards/") -> dict[str, float]:
        """Per-column mean over the samples it applies to (NaN when none), for logging."""
        out = {}
        for k, name in enumerate(self.names):
            col = self.values[:, k]
            ok = ~torch.isnan(col)
            out[f"{prefix}{name}"] = float(col[ok].mean()) if ok.any() else math.nan
        return out


def align(samples: Sequence[Sample], trajectories: Sequence[Trajectory]) -> list[Sample]:
    """The sample of each trajectory: positional when the lists have the same length, else by id."""
    if len(samples) == len(trajectories):
        return list(samples)
    by_id = {s.id: s for s in samples}
    missing = sorted({t.sample_id for t in trajectories if t.sample_id not in by_id})
    if missing:
        raise ValueError(f"trajectories refer to samples that were not given: {missing[:5]}")
    return [by_id[t.sample_id] for t in trajectories]
