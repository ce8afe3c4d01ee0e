"""One error type for every unreadable input: it names the file and says what is wrong.

Decoders (PIL, decord, PyAV, PDFium) fail with messages such as ``Check failed: st_nb >= 0`` or
``Data format error`` from deep inside C code. The loaders in this package catch those and raise a
``MediaError`` instead, chained to the original (``raise ... from err``) so the detail stays available.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


class MediaError(ValueError):
    """A media input that cannot be used.

    ``str(err)`` reads like ``cannot read video 'x.mp4': window [12.0, 20.0] s is outside the video
    (length 10.0 s)``. ``path`` is the file (or a short description such as ``<bytes>`` for in-memory
    data), ``reason`` is what is wrong, ``kind`` is ``image`` / ``video`` / ``PDF``.
    """

    def __init__(self, path: str | os.PathLike, reason: str, kind: str = "file") -> None:
        self.path = str(path)
        self.reason = reason
        self.kind = kind
        super().__init__(f"cannot read {kind} '{self.path}': {reason}")

    def __reduce__(self) -> tuple[type[MediaError], tuple[str, str, str]]:
        # The default pickling calls cls(*args) with the single message string; keep the fields instead,
        # so the error survives a trip through a DataLoader worker or a process pool.
        return (type(self), (self.path, self.reason, self.kind))


def require_file(path: str | os.PathLike, kind: str) -> str:
    """Return ``path`` as a string, or raise ``MediaError`` if it is missing, not a file, or empty."""
    text = str(path)
    p = Path(text)
    if not p.exists():
        raise MediaError(text, "file does not exist", kind)
    if not p.is_file():
        raise MediaError(text, "not a regular file", kind)
    if p.stat().st_size == 0:
        raise MediaError(text, "file is empty", kind)
    return text


# decord prefixes its messages with "[hh:mm:ss] /path/to/source.cc:123: "; the user does not need that.
_SOURCE_PREFIX = re.compile(r"^\[[\d:]+\]\s+\S+:\d+:\s*")


def describe(err: BaseException) -> str:
    """A one-line description of a library exception: its type and the first line of its message."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    text = _SOURCE_PREFIX.sub("", lines[0]) if lines else ""
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
