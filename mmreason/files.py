"""Input files read with bounds: the one reader every user-supplied file goes through (data rows, benchmark
files, predictions, a completion to score, templates, a config), so a hostile path costs a line, not a hang or
the machine's memory.

- Only a regular file is opened: a folder, a FIFO (whose ``open`` blocks until a writer comes), a device
  (``/dev/zero`` never ends) or a socket is one line naming it, found by ``stat`` before any ``open``; the file
  is then opened non-blocking and checked again on its descriptor (a path swapped in between changes nothing).
- Its size is checked before reading (a sparse 2 GB file is refused at once, not after reading it), and reading
  stops one byte past the bound (a file that grows while it is read).
- Text is UTF-8, a leading byte-order mark dropped (in every format alike); a byte that is not UTF-8 is one line
  naming the file, the line and the byte.
- ``parse_json``: JSON nested deeper than Python's parser can follow (``RecursionError``) is one line.

The bounds (bytes) are the ``MAX_*`` constants below; ``MMREASON_MAX_DATA_FILE_MB`` raises or lowers the data
files' one (datasets larger than 4 GiB belong in parquet shards, which are read by column, not whole).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

MiB = 1 << 20
MAX_DATA_BYTES = 4096 * MiB  # a JSON / JSONL data or benchmark file (MMREASON_MAX_DATA_FILE_MB)
MAX_PREDICTIONS_BYTES = 1024 * MiB  # a predictions file to re-score
MAX_TEXT_BYTES = 64 * MiB  # a completion to score, a subtitle file, a results / manifest file
MAX_TEMPLATE_BYTES = 1 * MiB  # a prompt or judge template


def max_data_bytes() -> int:
    """The data files' bound: ``MAX_DATA_BYTES`` unless ``MMREASON_MAX_DATA_FILE_MB`` says otherwise."""
    value = os.environ.get("MMREASON_MAX_DATA_FILE_MB")
    return int(float(value) * MiB) if value else MAX_DATA_BYTES


def label_of(what: str, path: str | os.PathLike) -> str:
    return f"{what} {str(path)!r}"


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def regular_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` when it names a regular file (links followed); FileNotFoundError / ValueError naming it else.
    Nothing is opened (a FIFO's ``open`` would block)."""
    label = label_of(what, path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{label} does not exist") from None
    except NotADirectoryError:
        raise FileNotFoundError(f"{label} does not exist (a part of its path is a file, not a folder)") from None
    except OSError as err:
        raise ValueError(f"{label} cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"{label} is {_kind(mode)}, not a file")
    return Path(path)


def read_bytes(path: str | os.PathLike, what: str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit``; ValueError naming ``what`` and the path for
    anything else (see the module doc)."""
    label = label_of(what, regular_file(path, what))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise ValueError(f"{label} cannot be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{label} is {_kind(st.st_mode)}, not a file")
        if st.st_size > limit:
            raise ValueError(f"{label} is {st.st_size:,} bytes, over the limit of {limit:,} bytes for a {what}")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{label} grew past the limit of {limit:,} bytes for a {what} while it was read")
    return data


def decode(data: bytes, label: str) -> str:
    """UTF-8 text of ``data`` without a leading byte-order mark; ValueError naming ``label``, the line and the
    byte otherwise."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ValueError(f"{label}: line {line}: byte {data[err.start]:#04x} is not UTF-8 text") from None
    return text[1:] if text.startswith("\ufeff") else text


def read_text(path: str | os.PathLike, what: str, limit: int) -> str:
    """``read_bytes`` decoded as UTF-8 text (``decode``)."""
    return decode(read_bytes(path, what, limit), label_of(what, path))


def parse_json(text: str | bytes, label: str) -> Any:
    """``json.loads(text)``; ValueError naming ``label`` for text that is not JSON or nests too deep."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{label}: JSON nested too deeply to read (thousands of levels)") from None
    except ValueError as err:
        raise ValueError(f"{label}: not valid JSON ({err})") from None


def lone_surrogate(value: Any, path: str = "") -> str | None:
    """The path of the first string (or key) in ``value`` that is not encodable text (a lone UTF-16 surrogate
    such as ``"\\ud800"``: valid JSON, no valid text), else None."""
    found = first_value(value, not_text, path)
    return None if found is None else found[0] or "the value"


def not_text(item: Any) -> bool:
    """Whether ``item`` is a string that UTF-8 cannot encode (it holds a lone surrogate)."""
    if not isinstance(item, str):
        return False
    try:
        item.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def first_value(value: Any, test: Callable[[Any], bool], path: str = "") -> tuple[str, Any] | None:
    """(its path, it) for the first value, key or item in ``value`` (JSON-like) that ``test`` accepts, else None.
    Iterative: any depth JSON gives is walked."""
    stack = [(value, path)]
    while stack:
        item, at = stack.pop()
        if test(item):
            return at, item
        if isinstance(item, dict):
            for key, inner in reversed(list(item.items())):
                stack.append((inner, f"{at}.{key}" if at else str(key)))
                stack.append((key, at))
        elif isinstance(item, list):
            stack.extend((inner, f"{at}[{k}]") for k, inner in reversed(list(enumerate(item))))
    return None
