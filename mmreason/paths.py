"""Where mmreason caches generated data and rendered pages: ``$MMREASON_CACHE`` or ~/.cache/mmreason."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("MMREASON_CACHE") or Path.home() / ".cache" / "mmreason")
    return root.joinpath(*parts)
