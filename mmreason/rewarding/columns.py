"""A reward's columns and weights: a spec bound to its function (``Bound``), the column names it gives
(``<name>`` for a list, ``<name>/<key>`` per sub-score of a dict), the weight of each column and the check
that a weight dict names sub-scores the reward returns; and where its calls run (``isolation``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args

from mmreason.rewarding.calling import CallPlan, RewardConfigError
from mmreason.rewarding.records import Isolation, RewardSpec


@dataclass
class Bound:
    """A spec resolved to its function, with what the runner learned about its output."""

    spec: RewardSpec
    fn: Callable[..., Any]
    plan: CallPlan
    diagnostics: tuple[str, ...]
    keys: list[str | None]  # None = the plain list column
    provisional: bool = False  # keys == [None] assumed (a @reward without declared keys), not yet seen


ISOLATIONS: tuple[str, ...] = get_args(Isolation)


def isolation(bound: Bound) -> str:
    """``process`` for a reward named by reference to code outside the package (it may hang), else ``thread``;
    a spec's explicit choice wins."""
    choice = bound.spec.isolation  # checked when the reward was bound
    if choice != "auto":
        return choice
    ref = bound.spec.ref if bound.spec.ref is not None else bound.spec.name
    outside = isinstance(ref, str) and ":" in ref and not ref.startswith("mmreason.")  # the package's own: thread
    return "process" if outside else "thread"


def column_name(bound: Bound, key: str | None) -> str:
    return bound.spec.name if key is None else f"{bound.spec.name}/{key}"


def column_weight(bound: Bound, key: str | None) -> float:
    weight = bound.spec.weight
    if isinstance(weight, dict):
        return float(weight.get(key, 0.0)) if key is not None else 0.0
    if key is not None and key in bound.diagnostics:
        return 0.0
    return float(weight)


def check_weight_keys(bound: Bound) -> None:
    weight = bound.spec.weight
    if not isinstance(weight, dict):
        return
    if None in bound.keys and len(bound.keys) == 1:
        raise RewardConfigError(
            f"reward {bound.spec.name!r} returns one score, so its weight must be a number, not {weight!r}"
        )
    unknown = sorted(set(weight) - {k for k in bound.keys if k is not None})
    if unknown:
        raise RewardConfigError(
            f"reward {bound.spec.name!r}: weights name sub-scores {unknown} that it does not return "
            f"(it returns {[k for k in bound.keys if k is not None]})"
        )
