"""Turning a config's reward reference into a function.

A reference is one of

- a registered name: ``"mcq"``;
- a dotted path: ``"my_package.rewards:caption_match"`` (attribute chains such as ``mod:Class.method``
  work too);
- a file: ``"rewards/my_reward.py:score"``, relative to ``base_dir`` (the config file's folder) and then
  to the working directory; absolute paths are used as they are.

The file is imported under a private module name derived from its absolute path, once: resolving it
again returns the same function, and a ``@reward`` decorator inside it registers only once.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from mmreason.rewarding.registry import REWARDS


def _is_file_ref(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _find_file(target: str, base_dir: str | Path | None) -> Path:
    path = Path(target).expanduser()
    candidates = [path] if path.is_absolute() else [Path(base_dir) / path] if base_dir else []
    if not path.is_absolute():
        candidates.append(Path.cwd() / path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"reward file {target!r} not found (looked at: {tried})")


def load_file_module(target: str, base_dir: str | Path | None = None) -> ModuleType:
    """Import the Python file ``target`` (see the module doc for how it is found)."""
    path = _find_file(target, base_dir)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"mmreason_user_reward_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import reward file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before exec: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _attribute(module: ModuleType, attr: str, ref: str) -> Any:
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise AttributeError(
                f"reward reference {ref!r}: {module.__name__} has no attribute {attr!r}; "
                f"callables there: {', '.join(public) or 'none'}"
            )
        obj = getattr(obj, part)
    return obj


def resolve_reward(ref: str | Callable[..., Any], base_dir: str | Path | None = None) -> Callable[..., Any]:
    """The reward function ``ref`` names (a callable is returned as it is)."""
    if callable(ref):
        return ref
    if not isinstance(ref, str) or not ref:
        raise TypeError(
            f"a reward reference is a name, 'pkg.module:function' or 'file.py:function', got {ref!r}"
        )
    if ":" not in ref:
        return REWARDS.get(ref)
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise ValueError(
            f"reward reference {ref!r}: expected 'pkg.module:function' or 'path/file.py:function'"
        )
    module = load_file_module(target, base_dir) if _is_file_ref(target) else importlib.import_module(target)
    obj = _attribute(module, attr, ref)
    if not callable(obj):
        raise TypeError(f"reward reference {ref!r} names a {type(obj).__name__}, not a function")
    return obj
