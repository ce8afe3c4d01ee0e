"""Where mmreason caches generated data and rendered pages: ``$MMREASON_CACHE`` or ~/.cache/mmreason."""

from __future__ import annotations

import json
import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("MMREASON_CACHE") or Path.home() / ".cache" / "mmreason")
    return root.joinpath(*parts)


def generated_jsonl(out_dir: str | Path, rows: int) -> Path | None:
    """``out_dir/data.jsonl`` if an earlier generation already wrote all ``rows`` rows there, else None
    (generators name their folder after their arguments, so a complete file is the same data)."""
    jsonl = Path(out_dir) / "data.jsonl"
    if jsonl.exists():
        with jsonl.open() as f:
            if sum(1 for _ in f) == rows:
                return jsonl
    return None


def write_jsonl(path: str | Path, rows: list[dict]) -> Path:
    """Write rows as JSON lines atomically (a reader never sees a half-written file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    tmp.replace(path)
    return path


STATE_FILE = "trainer_state.json"  # written last into checkpoint-<step>/: its presence marks a complete one


def checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    found = [p for p in Path(output_dir).glob("checkpoint-*") if p.is_dir() and (p / STATE_FILE).exists()
             and p.name.split("-")[-1].isdigit()]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))
