"""How a reward function is called and what it may return.

Two calling conventions, told apart by the function's signature:

- **native** ``fn(samples, trajectories, **kwargs)``: the lists of ``Sample`` and ``Trajectory`` (same
  length N, aligned), plus the reward's config kwargs.
- **TRL** ``fn(prompts, completions, **columns)``, detected by a first parameter named ``prompts`` or
  ``completions`` (or a function of ``**kwargs`` only). Called with keyword lists, as TRL's
  ``GRPOTrainer`` does: ``prompts``, ``completions``, ``completion_ids``, ``images``, ``answer`` and
  every ``Sample.meta`` column (None where a sample lacks it), plus the config kwargs. Only the names
  the function accepts are passed, unless it takes ``**kwargs``. With ``trl_format="text"`` prompts are
  the user text and completions plain strings; with ``"conversational"`` they are message lists
  (``[{"role": "assistant", "content": text}]``), as TRL passes them for chat datasets.

A reward returns N values (a list, tuple, 1-D tensor or array) or a dict of such lists, one per named
sub-score. Each value is a number or None ("does not apply"; NaN means the same). Anything else is an
output error, handled like an exception.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mmreason.types import Sample, Trajectory

NATIVE, TRL = "native", "trl"
TRL_FIRST_PARAMS = ("prompts", "completions")
TRL_RESERVED = ("prompts", "completions", "completion_ids")
TRL_FORMATS = ("text", "conversational")


class RewardConfigError(ValueError):
    """A reward cannot be called as configured (bad kwargs, a column it needs is missing)."""


class RewardOutputError(ValueError):
    """A reward returned something that is not N numbers / None (or a dict of such lists)."""


@dataclass(frozen=True)
class CallPlan:
    """What inspecting a reward's signature decided."""

    convention: str  # NATIVE | TRL
    is_async: bool
    params: frozenset[str]  # names it accepts by keyword
    var_kw: bool  # takes **kwargs
    required: frozenset[str]  # keyword parameters without a default (TRL)


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or (callable(fn) and inspect.iscoroutinefunction(type(fn).__call__))


def plan_call(fn: Callable[..., Any], kwargs: dict[str, Any], name: str) -> CallPlan:
    """Inspect ``fn`` once, at start-up, and check that the config kwargs fit its signature."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C callables have none: assume native
        return CallPlan(NATIVE, _is_async(fn), frozenset(), True, frozenset())
    params = list(sig.parameters.values())
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    named = [p for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    only_kwargs = not named and var_kw
    trl = only_kwargs or (bool(named) and named[0].name in TRL_FIRST_PARAMS)
    accepted = frozenset(p.name for p in named if p.kind is not p.POSITIONAL_ONLY)
    if trl:
        required = frozenset(p.name for p in named if p.default is p.empty)
        unknown = [k for k in kwargs if k not in accepted and not var_kw]
        if unknown:
            raise RewardConfigError(f"reward {name!r} does not accept kwargs {unknown}; its signature is {sig}")
        clash = [k for k in kwargs if k in TRL_RESERVED]
        if clash:
            raise RewardConfigError(f"reward {name!r}: kwargs {clash} clash with TRL's own arguments")
        return CallPlan(TRL, _is_async(fn), accepted, var_kw, required - set(kwargs))
    try:
        sig.bind(None, None, **kwargs)
    except TypeError as err:
        raise RewardConfigError(
            f"reward {name!r} cannot be called as fn(samples, trajectories, **{sorted(kwargs)}): {err}; "
            f"its signature is {sig}"
        ) from None
    return CallPlan(NATIVE, _is_async(fn), accepted, var_kw, frozenset())


def trl_arguments(
    samples: Sequence[Sample],
    trajectories: Sequence[Trajectory],
    plan: CallPlan,
    kwargs: dict[str, Any],
    trl_format: str,
    *,
    name: str,
) -> dict[str, Any]:
    """The keyword arguments of a TRL-convention call (see the module doc)."""
    if trl_format == "conversational":
        prompts: list[Any] = [s.messages for s in samples]
        completions: list[Any] = [[{"role": "assistant", "content": t.completion_text}] for t in trajectories]
    else:
        prompts = [s.prompt_text for s in samples]
        completions = [t.completion_text for t in trajectories]
    args: dict[str, Any] = {"prompts": prompts, "completions": completions}
    if plan.var_kw or "completion_ids" in plan.params:
        args["completion_ids"] = [t.token_ids[t.prompt_length :].tolist() for t in trajectories]
    args["images"] = [s.images for s in samples]
    args["answer"] = [s.answer for s in samples]
    keys: dict[str, None] = {}
    for sample in samples:
        keys.update(dict.fromkeys(sample.meta))
    for key in keys:
        if key not in TRL_RESERVED:
            args[key] = [s.meta.get(key) for s in samples]
    if not plan.var_kw:
        args = {k: v for k, v in args.items() if k in plan.params}
    missing = sorted(plan.required - set(args))
    if missing:
        raise RewardConfigError(
            f"reward {name!r} needs column(s) {missing}, which these samples do not have "
            f"(columns: answer, images, {', '.join(keys) or 'no meta columns'})"
        )
    args.update(kwargs)
    return args


# ---- outputs -----------------------------------------------------------------------------------


def _value(x: Any) -> float:
    if x is None:
        return math.nan
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        x = x.item()
    if isinstance(x, (str, bytes)) or not hasattr(x, "__float__"):
        raise RewardOutputError(f"a reward value must be a number or None, got {type(x).__name__} {x!r:.60}")
    value = float(x)
    if math.isinf(value):
        raise RewardOutputError(f"a reward value must be finite, got {value}")
    return value  # NaN passes: it means "does not apply", like None


def _values(out: Any, n: int) -> list[float]:
    if isinstance(out, torch.Tensor) or type(out).__name__ == "ndarray":
        if out.ndim != 1:
            raise RewardOutputError(f"a reward tensor must be 1-D [N], got shape {tuple(out.shape)}")
        out = out.tolist()
    if not isinstance(out, (list, tuple)):
        raise RewardOutputError(f"a reward must return a list of N values or a dict of lists, got {type(out).__name__}")
    if len(out) != n:
        raise RewardOutputError(f"a reward returned {len(out)} values for {n} samples")
    return [_value(x) for x in out]


def coerce_output(out: Any, n: int) -> dict[str | None, list[float]]:
    """A reward's return value as ``{key: [N] floats}``; key None for a plain list. NaN = does not apply."""
    if isinstance(out, dict):
        if not out:
            raise RewardOutputError("a reward returned an empty dict")
        result: dict[str | None, list[float]] = {}
        for key, values in out.items():
            if not isinstance(key, str) or not key or "/" in key:
                raise RewardOutputError(f"sub-score keys must be non-empty strings without '/', got {key!r}")
            result[key] = _values(values, n)
        return result
    return {None: _values(out, n)}
