"""Option checking for registered functions: a misspelt config key fails at once and names itself."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from mmreason.registry import closest


def check_options(kind: str, name: str, fn: Callable[..., Any], options: Mapping[str, Any], skip: int) -> None:
    """Raise ``TypeError`` naming any option ``fn`` does not take, or any required option that is missing.

    ``skip`` leading parameters are the positional data arguments (tensors), not options.
    """
    params = list(inspect.signature(fn).parameters.values())[skip:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return  # the function takes arbitrary options and checks them itself
    accepted = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for option in options:
        if option not in accepted:
            hint = closest(option, accepted)
            msg = f"{kind} {name!r} has no option {option!r}"
            if hint:
                msg += f" (did you mean {hint!r}?)"
            raise TypeError(f"{msg}; its options: {', '.join(accepted) or '(none)'}")
    for p in params:
        if p.default is inspect.Parameter.empty and p.name not in options and p.kind is not p.VAR_POSITIONAL:
            raise TypeError(f"{kind} {name!r} needs option {p.name!r}")
