"""A published benchmark's files read as the benchmark lays them out, values as written (for the packs
that read them: ``mathvista``, ``mmmu``, ``chartqa``, ``docvqa``, ``videomme``).

``table_rows(path, pack)`` returns ``(rows, source)`` pairs from:

- a ``.json`` object keyed by id (MathVista's ``testmini.json``: the key is kept as ``_key``), an object with a
  ``"data"`` list (DocVQA / InfographicVQA), or a JSON list; a ``.jsonl`` file (``mmreason.rows``);
- a ``.parquet`` file (Hugging Face layouts: image columns are ``{"bytes", "path"}`` structs);
- a folder: every ``*.parquet`` under it (MMMU's one folder per subject), else every ``*.json`` / ``*.jsonl``.

A row the pack cannot use raises ``ValueError`` naming the file, the row and the field (``where``); rows a pack
skips on purpose (DocVQA's test split has no answers) are counted in ``Loaded.skipped``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mmreason.files import decode, max_data_bytes, read_bytes
from mmreason.rows import DuplicateKey, bad_value, duplicate_line, loads, read_rows
from mmreason.types import Sample


class Loaded(list):
    """The samples of a benchmark file, with the rows left out (reason -> count), lines for the results
    header (subtitles found, ...) and how answers are extracted; the harness reads all three."""

    def __init__(
        self,
        samples: Iterable[Sample] = (),
        skipped: dict[str, int] | None = None,
        notes: list[str] | None = None,
        extraction: str = "",
    ) -> None:
        super().__init__(samples)
        self.skipped = dict(skipped or {})
        self.notes = list(notes or [])
        self.extraction = extraction  # how answers are taken from responses (replaced under --use_extraction)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def _json_table(path: Path, pack: str) -> list[dict[str, Any]]:
    label = f"{pack} data file {str(path)!r}"
    if path.suffix == ".jsonl":
        return read_rows(path, pack)
    text = decode(read_bytes(path, f"{pack} data file", max_data_bytes()), label)  # bounded; BOM dropped
    if not text.lstrip(" \t\r\n").startswith("{"):
        return read_rows(path, pack)
    try:
        data = loads(text)
    except DuplicateKey as err:
        raise ValueError(duplicate_line(label, "an object", err)) from None
    except RecursionError:
        raise ValueError(f"{label}: JSON nested too deeply to read (thousands of levels)") from None
    except ValueError as err:
        if path.suffix != ".json":
            return read_rows(path, pack)  # JSON Lines whose first line is an object
        raise ValueError(f"{label}: not valid JSON ({err})") from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        rows = data["data"]
    elif isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        rows = [{"_key": key, **value} for key, value in data.items()]
    else:
        raise ValueError(
            f'{label}: a JSON object that is neither keyed by id (every value an object) nor {{"data": [rows]}}'
        )
    for k, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{label}: row {k} is a JSON {type(row).__name__}, not an object")
        bad = bad_value(row)
        if bad:
            raise ValueError(f"{label}: row {k}: {bad}")
    return rows


def table_rows(path: str | Path, pack: str) -> list[tuple[dict[str, Any], str]]:
    """(row, the file it came from) for every row of ``path`` (a file or a folder of files)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{pack} data file {str(path)!r} does not exist")
    if path.is_dir():
        files = sorted(path.rglob("*.parquet")) or sorted(
            p for p in path.rglob("*") if p.suffix in (".json", ".jsonl") and p.is_file()
        )
        if not files:
            raise ValueError(f"{pack} data folder {str(path)!r} holds no .parquet, .json or .jsonl file")
    else:
        files = [path]
    out = []
    for file in files:
        rows = read_rows(file, pack) if file.suffix == ".parquet" else _json_table(file, pack)
        out += [(row, str(file)) for row in rows]
    return out


def row_where(source: str, index: int, rid: Any) -> str:
    """``{file}: row {index} (id {id!r})``, the prefix of every row error."""
    return f"{source}: row {index} (id {rid!r})"


def image_field(value: Any, base: Path, where: str, field: str) -> str | bytes | None:
    """An image column: a path (relative to ``base``) -> its absolute path; a parquet ``{"bytes", "path"}``
    struct -> its bytes (or its path when the bytes are absent); None / "" -> None. The file's existence is
    not checked here: a missing image fails its doc when the prompt is built (counted, named in the samples
    file), and re-scoring saved answers needs no images at all."""
    if value is None or value == "":
        return None
    if isinstance(value, dict):
        if isinstance(value.get("bytes"), str):  # bytes(str) fails with "string argument without an encoding"
            raise ValueError(f"{where}: {field}'s 'bytes' is text (a str), not image bytes")
        if value.get("bytes"):
            return bytes(value["bytes"])
        value = value.get("path")
        if not value:
            return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if not isinstance(value, str):
        raise ValueError(f"{where}: {field} is a {type(value).__name__}, not an image path or image bytes")
    return os.path.abspath(os.path.join(base, value))  # abspath, not resolve(): no file-system calls per row


def text_field(row: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    """``row[key]`` as text (a number is written back as text); ValueError when required and absent."""
    value = row.get(key)
    if value is None or (isinstance(value, str) and not value.strip() and required):
        if required:
            raise ValueError(f"{where}: no {key!r} field")
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{where}: {key!r} is a {type(value).__name__}, not text")
    return str(value)
