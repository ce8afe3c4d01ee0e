"""Where mmreason caches generated data and rendered pages: ``$MMREASON_CACHE`` or ~/.cache/mmreason; and the
JSON Lines files it writes and reads back.

Reading back the JSON Lines files a run appends to (``metrics.jsonl``, ``completions.jsonl``, ``events.log``, an
eval's ``*_samples_*.jsonl`` journal): a process killed mid-write leaves its last line cut short, and that must
never make the run unresumable or its report unreadable. ``read_jsonl`` drops a broken last line with one
warning naming the file; a broken line anywhere else (not JSON, not an object, not UTF-8) is skipped and counted
(``JsonLines.skipped``), with one warning naming the file, the count and the first line numbers. Lines are split
on ``"\\n"`` only (JSON escapes it inside strings; ``str.splitlines`` would also cut at U+2028 or U+0085 inside a
response). ``seal_jsonl`` readies such a file for appending again: a cut-short last line is cut off (or, when it
is a whole record that only lacks its newline, ended), so the next row never lands glued to a broken one.
(Input data rows are read by ``mmreason/rows.py``, which refuses a broken line instead.)
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO


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
    found = [
        p
        for p in Path(output_dir).glob("checkpoint-*")
        if p.is_dir() and (p / STATE_FILE).exists() and p.name.split("-")[-1].isdigit()
    ]
    return sorted(found, key=lambda p: int(p.name.split("-")[-1]))


log = logging.getLogger(__name__)  # mmreason.paths: the read-back warnings


class JsonLines(list):
    """The rows of a JSON Lines file (dicts, in file order), with what was left out."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), *, skipped: int = 0, cut_last: bool = False) -> None:
        super().__init__(rows)
        self.skipped = skipped  # broken lines before the last one
        self.cut_last = cut_last  # the last line was broken (a write cut short) and dropped


def _record(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors; too deep
        return None
    return value if isinstance(value, dict) else None


def read_jsonl(path: str | Path) -> JsonLines:
    """Every JSON object line of ``path``; a broken last line dropped, other broken lines counted and skipped,
    each kind said once in a warning that names the file."""
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    numbered = [(n, raw) for n, raw in enumerate(lines, 1) if raw.strip()]
    rows, bad = [], []
    for n, raw in numbered:
        record = _record(raw)
        if record is None:
            bad.append(n)
        else:
            rows.append(record)
    cut_last = bool(bad) and bad[-1] == numbered[-1][0]
    if cut_last:
        bad.pop()
        log.warning(
            "%s: the last line (%d) is cut short or not a JSON object (a write interrupted by a kill?); dropped",
            path,
            numbered[-1][0],
        )
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        log.warning(
            "%s: %d line%s not a JSON object (line %s); skipped",
            path,
            len(bad),
            " is" if len(bad) == 1 else "s are",
            shown,
        )
    return JsonLines(rows, skipped=len(bad), cut_last=cut_last)


def seal_jsonl(path: str | Path) -> None:
    """Before appending to ``path``: a last line without its newline is ended when it is a whole record, else cut
    off (with a warning naming the file); a file that ends in a newline, or none, is left as it is."""
    path = Path(path)
    if not path.is_file():
        return
    with path.open("rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        start = _last_line_start(f, size)
        f.seek(start)
        tail = f.read()
        if _record(tail) is not None:
            f.write(b"\n")
            return
        f.truncate(start)
    log.warning("%s: the last line was cut short (a write interrupted by a kill?); removed before appending", path)


def _last_line_start(f: BinaryIO, size: int, block: int = 1 << 16) -> int:
    """The offset just after the last ``"\\n"`` of the file (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        found = f.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


# ---- checkpoint folders, read without trusting them (train/checkpoint_verify.py, mmreason.rundir) ----

MAX_JSON_BYTES = 64 << 20  # checksums.json / trainer_state.json are a few kB; a larger one is not ours


def read_regular(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path`` if it is a regular file (at most ``limit`` of them); else ``OSError``. Opened
    without blocking and checked on the open file, so a FIFO, socket or device is never read (a FIFO would
    block the reader forever)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{path.name} is not a regular file")
        if limit is not None and info.st_size > limit:
            raise OSError(f"{path.name} is {info.st_size:,} bytes, over {limit:,}")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read()
    finally:
        os.close(fd)


def is_mmreason_checkpoint(folder: Path) -> bool:
    """Whether ``folder``'s trainer state is one mmreason writes (a JSON object with a sampler state); another
    trainer's ``checkpoint-N`` (HF Trainer's ``trainer_state.json`` has none) is not."""
    return _state_of(folder) is not None


def checkpoint_run_id(folder: Path) -> str | None:
    """The id of the run that wrote ``folder`` (None: not an mmreason checkpoint, or one written before ids)."""
    state = _state_of(folder)
    run_id = state.get("run_id") if state is not None else None
    return run_id if isinstance(run_id, str) else None


def _state_of(folder: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(read_regular(folder / STATE_FILE, MAX_JSON_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("sampler"), dict) else None
