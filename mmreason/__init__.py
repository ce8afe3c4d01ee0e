"""mmreason: GRPO-family RL that teaches vision-language models to reason over multimodal inputs."""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__version__ = "0.2.0.dev0"

# The build maps the repository's top-level tasks/ and rewards/ into this package as mmreason.tasks
# and mmreason.rewards (see setup.py). When the package is imported straight from a source checkout
# (``python -m mmreason`` in the repository root), the same two names resolve to those folders here.
_SOURCE_ROOT = Path(__file__).resolve().parent.parent
_MAPPED = {f"{__name__}.tasks": "tasks", f"{__name__}.rewards": "rewards"}


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        folder = _MAPPED.get(fullname)
        if folder is None:
            return None
        init = _SOURCE_ROOT / folder / "__init__.py"
        if not init.exists():
            return None
        return importlib.util.spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])


if not (Path(__file__).parent / "tasks").exists() and (_SOURCE_ROOT / "setup.py").exists():
    sys.meta_path.append(_CheckoutFinder())  # last: an installed or editable package wins
