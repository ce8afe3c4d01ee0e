"""Saved answers to re-score (``mmreason eval score --predictions FILE``), read from the shapes they come in:

- a JSON object ``{id: response}`` or ``{id: {"response": ..., "extraction": ...}}`` (MathVista's
  ``output_*.json`` keyed by ``pid``; MMMU's ``output.json`` / ``total_val_output.json`` of ``{id: answer}``);
- a JSON list or JSON Lines of records with an id and a response (MMMU's per-subject ``output.json``, MMMU-Pro's
  ``*.jsonl``, this harness's own samples files);
- an lmms-eval samples file: records with ``doc`` (the benchmark's row: its id is read from it), ``resps`` /
  ``filtered_resps`` (the response, the first of nested lists).

A record's id is the first of ``pid``, ``id``, ``questionId``, ``question_id``, ``doc_id`` (inside ``doc``
first); its response the first of ``response``, ``filtered_resps``, ``resps``, ``prediction``, ``pred``,
``output``, ``text``. ``extraction`` is kept for ``--use_extraction``. A record of a doc that failed in the run that wrote it (an
``error`` and no response, as in this harness's samples files) is left out. A record without an id or a
response, a repeated id, or a file in none of these shapes is one error line naming the file and the record.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmreason.files import MAX_PREDICTIONS_BYTES, lone_surrogate, read_text, regular_file

ID_KEYS = ("pid", "id", "questionId", "question_id", "doc_id")
RESPONSE_KEYS = ("response", "filtered_resps", "resps", "prediction", "pred", "output", "text")


@dataclass(frozen=True)
class Prediction:
    response: str
    extraction: str | None = None


def _first_text(value: Any) -> str | None:
    while isinstance(value, (list, tuple)):
        if not value:
            return None
        value = value[0]
    if value is None or isinstance(value, dict):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _record_id(record: dict[str, Any]) -> Any:
    doc = record.get("doc")
    for holder in ((doc,) if isinstance(doc, dict) else ()) + (record,):
        for key in ID_KEYS:
            if holder.get(key) not in (None, ""):
                return holder[key]
    return None


def _from_record(record: Any, where: str, key: Any = None) -> tuple[str, Prediction] | None:
    if isinstance(record, str):
        return str(key), Prediction(record)
    if not isinstance(record, dict):
        raise ValueError(f"{where}: a {type(record).__name__}, not a record or a response string")
    rid = key if key is not None else _record_id(record)
    if rid is None:
        raise ValueError(f"{where}: no id field (one of {', '.join(ID_KEYS)})")
    response = next(
        (_first_text(record[k]) for k in RESPONSE_KEYS if k in record and _first_text(record[k]) is not None), None
    )
    extraction = _first_text(record.get("extraction"))
    if response is None and extraction is None and "error" in record:
        return None  # a doc that failed in the run that wrote the file: it has no answer here either
    if response is None and extraction is None:
        raise ValueError(f"{where} (id {rid!r}): no response field (one of {', '.join(RESPONSE_KEYS)})")
    return str(rid), Prediction(response or "", extraction)


def _records(path: Path) -> list[tuple[Any, Any, str]]:
    """(key or None, record, where) in file order."""
    text = read_text(path, "predictions file", MAX_PREDICTIONS_BYTES)  # a regular file, bounded; BOM dropped
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except RecursionError:
            raise ValueError(f"{path}: JSON nested too deeply to read") from None
        except ValueError:
            data = None  # JSON Lines
        if isinstance(data, dict):
            return [(k, v, f"{path}: key {k!r}") for k, v in data.items()]
        if isinstance(data, list):
            return [(None, v, f"{path}: record {n}") for n, v in enumerate(data)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((None, json.loads(line), f"{path}: line {n}"))
            except RecursionError:
                raise ValueError(f"{path}: line {n}: JSON nested too deeply to read") from None
            except ValueError as err:
                raise ValueError(
                    f"{path}: line {n} is not JSON ({err}); a predictions file is JSON or JSON Lines"
                ) from None
    return out


def read_predictions(path: str | Path) -> dict[str, Prediction]:
    """id -> its saved answer, from any of the shapes of the module doc."""
    path = regular_file(path, "predictions file")  # a folder or a FIFO is named as such, never "does not exist"
    out: dict[str, Prediction] = {}
    for key, record, where in _records(path):
        bad = lone_surrogate(record)
        if bad:  # valid JSON, no valid text: the samples file written from it could not be encoded
            raise ValueError(f"{where}: field {bad!r} holds a lone surrogate (not valid Unicode text)")
        found = _from_record(record, where, key)
        if found is None:
            continue
        rid, prediction = found
        if rid in out:
            raise ValueError(f"{where}: id {rid!r} occurs twice in the predictions file")
        out[rid] = prediction
    if not out:
        raise ValueError(f"predictions file {str(path)!r} holds no predictions")
    return out
