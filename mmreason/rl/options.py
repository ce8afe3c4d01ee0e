"""Option checking for registered functions: a misspelt config key fails at once and names itself.

A registered function's options are its keyword-only parameters (those after ``*``); what comes before them is
its data (an estimator's ``rewards, group_ids, weights``, a loss's ``LossInputs``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, get_args, get_origin, get_type_hints

from mmreason.registry import closest


def keyword_options(fn: Callable[..., Any], *, exclude: Collection[str] = ()) -> list[str]:
    """The options of ``fn``: its keyword-only parameters, less ``exclude``."""
    params = inspect.signature(fn).parameters.values()
    return [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in exclude]


def choices_of(fn: Callable[..., Any]) -> dict[str, tuple[Any, ...]]:
    """The closed sets among ``fn``'s options: ``{name: allowed values}`` of those typed ``Literal[...]``."""
    hints = get_type_hints(fn)
    return {k: get_args(hints[k]) for k in keyword_options(fn) if get_origin(hints.get(k)) is Literal}


def check_choices(kind: str, name: str, choices: Mapping[str, tuple[Any, ...]], options: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming an option whose value is not one of its ``choices``."""
    for key, allowed in choices.items():
        if key in options and options[key] not in allowed:
            raise ValueError(f"{kind} {name!r}: {key} must be one of {allowed}, got {options[key]!r}")


def check_options(
    kind: str, name: str, fn: Callable[..., Any], options: Mapping[str, Any], *, exclude: Collection[str] = ()
) -> None:
    """Raise ``TypeError`` naming any option ``fn`` does not take, or any required option that is missing.

    ``exclude``: keyword-only parameters that are not options (a loss's LossInputs fields in its keyword form).
    """
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return  # the function takes arbitrary options and checks them itself
    keyword = [p for p in params if p.kind is p.KEYWORD_ONLY and p.name not in exclude]
    accepted = [p.name for p in keyword]
    for option in options:
        if option not in accepted:
            hint = closest(option, accepted)
            msg = f"{kind} {name!r} has no option {option!r}"
            if hint:
                msg += f" (did you mean {hint!r}?)"
            raise TypeError(f"{msg}; its options: {', '.join(accepted) or '(none)'}")
    for p in keyword:
        if p.default is inspect.Parameter.empty and p.name not in options:
            raise TypeError(f"{kind} {name!r} needs option {p.name!r}")
