"""Named registries: the one way components (estimators, losses, rewards, tasks) are found by name.

A duplicate name is an error naming both functions; an unknown name lists the valid ones and the
closest match, so a typo in a config is caught at start-up rather than mid-run.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from mmreason.references import is_reference, resolve_reference

T = TypeVar("T")

# Where a method's formula comes from, as `mmreason list` prints it (docs/algorithms.md#provenance).
PROVENANCES = {
    "equations": "the paper's equations or text",
    "authors' code": "the authors' released code is the specification",
    "re-implementations": "public re-implementations restate it; not checked against the paper or its code",
    "summaries": "read from published summaries of the paper",
    "abstract only": "a stated reading of the abstract; each open choice is an option with a default",
    "proposed": "the paper gives the idea without a formula; the formula is ours",
    "standard": "a convention of the field, not one paper's method",
}


def pack_modules(leaf: str) -> dict[str, str]:
    """pack -> ``mmreason.tasks.<pack>.<leaf>`` for every pack that has that module (found, not imported)."""
    packs = importlib.import_module("mmreason.tasks")  # by name: the engine never imports a pack's code
    found = {}
    for info in pkgutil.iter_modules(packs.__path__):
        module = f"{packs.__name__}.{info.name}.{leaf}"
        if info.ispkg and importlib.util.find_spec(module) is not None:
            found[info.name] = module
    return found


def closest(name: str, candidates: list[str] | tuple[str, ...]) -> str | None:
    """The candidate closest to ``name`` (for "did you mean" hints), or None."""
    matches = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.5)
    return matches[0] if matches else None


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def first_doc_line(obj: Any) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip()
    return doc.splitlines()[0].strip() if doc else ""


class Registry(Generic[T]):
    """A name -> object table with loud failures.

    >>> estimators = Registry("estimator")
    >>> @estimators.register("grpo")
    ... def grpo(rewards, group_ids): ...
    """

    def __init__(self, kind: str, loader: Callable[[], None] | None = None, item_type: type | None = None) -> None:
        self.kind = kind
        self.item_type = item_type  # what a reference must name: an instance of this type (None: a callable)
        self._items: dict[str, T] = {}
        self._provenance: dict[str, str] = {}  # name -> a key of PROVENANCES
        self._loader = loader  # imports the modules that fill this registry, once, on first lookup
        self._loaded = loader is None

    def register(
        self, name: str | None = None, *, replace: bool = False, provenance: str | None = None
    ) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            key = name or getattr(obj, "__name__", None)
            if not key:
                raise ValueError(f"a {self.kind} needs a name")
            self.add(key, obj, replace=replace, provenance=provenance)
            return obj

        return decorator

    def add(self, name: str, obj: T, *, replace: bool = False, provenance: str | None = None) -> None:
        """Register ``obj`` as ``name``; ``provenance`` (a key of ``PROVENANCES``) says where its formula comes from."""
        if provenance is not None:
            if provenance not in PROVENANCES:
                raise ValueError(f"{self.kind} {name!r}: provenance {provenance!r} is not one of {sorted(PROVENANCES)}")
            self._provenance[name] = provenance
        old = self._items.get(name)
        if old is not None and old is not obj and not replace:
            if _qualname(old) == _qualname(obj):  # the same module imported twice (e.g. a re-run file)
                self._items[name] = obj
                return
            raise ValueError(f"{self.kind} {name!r} is registered twice: by {_qualname(old)} and by {_qualname(obj)}")
        self._items[name] = obj

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True
            assert self._loader is not None
            self._loader()

    def get(self, name: str, base_dir: str | None = None) -> T:
        """The object registered as ``name``; a reference ``pkg.module:fn`` / ``file.py:fn`` (relative to
        ``base_dir``, then the working directory) is imported once and kept under that name."""
        self._ensure_loaded()
        if name not in self._items and is_reference(name):
            self._items[name] = resolve_reference(name, self.kind, base_dir, expect=self.item_type)
        try:
            return self._items[name]
        except KeyError:
            valid = sorted(self._items)
            hint = closest(name, valid)
            msg = f"unknown {self.kind} {name!r}"
            if hint:
                msg += f" (did you mean {hint!r}?)"
            raise KeyError(f"{msg}; valid: {', '.join(valid)}") from None

    def __contains__(self, name: str) -> bool:
        self._ensure_loaded()
        return name in self._items

    def names(self) -> list[str]:
        self._ensure_loaded()
        return sorted(self._items)

    def items(self) -> Iterator[tuple[str, T]]:
        self._ensure_loaded()
        yield from sorted(self._items.items())

    def describe(self) -> list[tuple[str, str]]:
        """Return (name, one-line doc) rows for `mmreason list`."""
        return [(name, first_doc_line(obj)) for name, obj in self.items()]

    def provenance(self, name: str) -> str:
        """Return where the method ``name`` comes from (``PROVENANCES``), or "" when its registration said nothing."""
        self._ensure_loaded()
        return self._provenance.get(name, "")
