"""References to Python objects in configs: ``pkg.module:attr`` or ``path/file.py:attr``.

``pkg.module:attr`` imports the module (attribute chains such as ``mod:Class.method`` work too);
``path/file.py:attr`` imports the file, found relative to ``base_dir`` (the config file's folder) and then
to the working directory; absolute paths are used as they are. A file is imported once, under a private
module name derived from its absolute path: resolving it again returns the same object, and a
registering decorator inside it runs only once. Rewards, estimators and policy losses resolve the same way.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def is_reference(name: str) -> bool:
    """``pkg.module:attr`` / ``file.py:attr`` rather than a registered name."""
    return ":" in name


def resolve_reference(
    ref: str, kind: str = "object", base_dir: str | Path | None = None, expect: type | None = None
) -> Any:
    """The callable ``ref`` names (or, with ``expect``, the instance of that type, such as a ``TaskPack``);
    errors name ``kind`` (reward, estimator, task ...) and the reference."""
    target, _, attr = ref.rpartition(":")
    if not target or not attr:
        raise ValueError(f"{kind} reference {ref!r}: expected 'pkg.module:function' or 'path/file.py:function'")
    module = load_file_module(target, base_dir, kind) if _is_file_ref(target) else importlib.import_module(target)
    obj = _attribute(module, attr, ref, kind)
    if expect is not None and not isinstance(obj, expect):
        raise TypeError(f"{kind} reference {ref!r} names a {type(obj).__name__}, not a {expect.__name__}")
    if expect is None and not callable(obj):
        raise TypeError(f"{kind} reference {ref!r} names a {type(obj).__name__}, not a function")
    return obj


def _is_file_ref(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _find_file(target: str, base_dir: str | Path | None, kind: str) -> Path:
    path = Path(target).expanduser()
    candidates = [path] if path.is_absolute() else [Path(base_dir) / path] if base_dir else []
    if not path.is_absolute():
        candidates.append(Path.cwd() / path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    tried = ", ".join(str(c) for c in candidates)
    raise FileNotFoundError(f"{kind} file {target!r} not found (looked at: {tried})")


def load_file_module(target: str, base_dir: str | Path | None = None, kind: str = "reward") -> ModuleType:
    """Import the Python file ``target`` (see the module doc for how it is found)."""
    path = _find_file(target, base_dir, kind)
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    module_name = f"mmreason_user_{kind.replace(' ', '_')}_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {kind} file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # before exec: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _attribute(module: ModuleType, attr: str, ref: str, kind: str) -> Any:
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            public = sorted(n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n)))
            raise AttributeError(
                f"{kind} reference {ref!r}: {module.__name__} has no attribute {attr!r}; "
                f"callables there: {', '.join(public) or 'none'}"
            )
        obj = getattr(obj, part)
    return obj
