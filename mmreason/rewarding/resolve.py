"""Turning a config's reward reference into a function.

A reference is one of

- a registered name: ``"mcq"``;
- a dotted path: ``"my_package.rewards:caption_match"`` (attribute chains such as ``mod:Class.method``
  work too);
- a file: ``"rewards/my_reward.py:score"``, relative to ``base_dir`` (the config file's folder) and then
  to the working directory; absolute paths are used as they are.

How references are resolved: ``mmreason.references`` (shared with estimators and policy losses).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmreason.references import is_reference, resolve_reference
from mmreason.rewarding.registry import REWARDS


def resolve_reward(ref: str | Callable[..., Any], base_dir: str | Path | None = None) -> Callable[..., Any]:
    """The reward function ``ref`` names (a callable is returned as it is)."""
    if callable(ref):
        return ref
    if not isinstance(ref, str) or not ref:
        raise TypeError(f"a reward reference is a name, 'pkg.module:function' or 'file.py:function', got {ref!r}")
    if not is_reference(ref):
        return REWARDS.get(ref)
    return resolve_reference(ref, "reward", base_dir)
