"""Differences between the transformers releases the project runs on (5.19 in the vLLM venv, 5.2x beside).

transformers renamed the cache argument of a model's forward (and of ``generate``) from ``past_key_values``
to ``cache``; a release that does not know the new name rejects it (``The following model_kwargs are not
used by the model: ['cache']``). ``cache_kwargs(model, cache)`` spells it the way the loaded model accepts.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


_CACHE_NAMES: dict[type, str] = {}  # model class -> the name its forward takes (read once per class)


def _cache_name(forward_cls: type[torch.nn.Module]) -> str:
    if forward_cls not in _CACHE_NAMES:
        params = inspect.signature(forward_cls.forward).parameters
        _CACHE_NAMES[forward_cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_NAMES[forward_cls]


def cache_name(model: torch.nn.Module) -> str:
    """``"cache"`` or ``"past_key_values"``: the name the model's forward takes its KV cache under."""
    inner: torch.nn.Module = getattr(model, "get_base_model", lambda: model)()
    return _cache_name(type(inner))


def cache_kwargs(model: torch.nn.Module, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for a forward or ``generate`` call of ``model``."""
    return {cache_name(model): cache}


def output_cache(out: Any) -> Any:
    """The KV cache a forward returned, under either name."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
