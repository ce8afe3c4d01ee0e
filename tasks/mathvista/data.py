"""MathVista's files as published: the repository's ``data/testmini.json`` / ``test.json`` (an object keyed by
``pid``) and the Hugging Face parquet of the same rows (with ``decoded_image``).

    {"pid": "1", "question": str, "image": "images/1.jpg", "decoded_image": {"bytes", "path"} (parquet),
     "choices": [str] | null, "unit": str | null, "precision": 1 | 2 | null, "answer": str,
     "question_type": "multi_choice" | "free_form", "answer_type": "text" | "integer" | "float" | "list",
     "metadata": {"category", "task", "context", "grade", "skills": [str], "source", "language", ...},
     "query": str (the HF rows and query.json: the prompt the benchmark built)}

``image`` resolves against ``image_dir`` (``--task_args image_dir=``; default: the data file's folder, where
the repository keeps ``images/``); the parquet's ``decoded_image`` bytes are used when present. The prompt is
the row's ``query`` when it has one, else built as the benchmark's ``build_query.py`` builds its zero-shot
query: ``Question: ...`` (with `` (Unit: u)``), ``Choices:`` with ``(A) ...`` lines, the hint for the answer
type, ``Solution:``. ``mathvista_row`` turns one row into a ``Sample`` (training reads rows the same way).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mmreason.published_files import Loaded, image_field, row_where, table_rows, text_field
from mmreason.types import Sample

QUESTION_TYPES = ("multi_choice", "free_form")
ANSWER_TYPES = ("text", "integer", "float", "list")
MAX_CHOICES = 26  # options A..Z (the letters build_query and the scorer name them by)
MAX_CHOICE_CHARS = 2_000  # one option's text (the published ones are under 200); the scorer's edit distance
# runs over every option for every doc, so a longer one is refused when the file loads
METADATA = ("category", "task", "context", "grade", "skills", "source", "language", "split")
HINTS = {
    "multi_choice": "Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, "
    "at the end.",
    "integer": "Hint: Please answer the question requiring an integer answer and provide the final value, e.g., "
    "1, 2, 3, at the end.",
    ("float", 1): "Hint: Please answer the question requiring a floating-point number with one decimal place and "
    "provide the final value, e.g., 1.2, 1.3, 1.4, at the end.",
    ("float", 2): "Hint: Please answer the question requiring a floating-point number with two decimal places and "
    "provide the final value, e.g., 1.23, 1.34, 1.45, at the end.",
    "list": "Hint: Please answer the question requiring a Python list as an answer and provide the final list, "
    "e.g., [1, 2, 3], [1.2, 1.3, 1.4], at the end.",
}


def build_query(
    question: str,
    *,
    choices: list[str] | None,
    unit: str | None,
    question_type: str,
    answer_type: str,
    precision: int | None,
) -> str:
    """The zero-shot query of ``build_query.py`` (no caption, no OCR, shot type "solution")."""
    text = f"Question: {question}" + (f" (Unit: {unit})" if unit else "")
    parts = [text]
    if choices:
        parts.append("\n".join(["Choices:", *(f"({chr(ord('A') + k)}) {c}" for k, c in enumerate(choices))]))
    key: Any = question_type if question_type == "multi_choice" else answer_type
    if answer_type == "float" and question_type != "multi_choice":
        key = ("float", precision)
    if key in HINTS:
        parts.append(HINTS[key])
    parts.append("Solution: ")
    return "\n".join(parts)


def _precision(value: Any, where: str, answer_type: str) -> int | None:
    if value is None or (isinstance(value, float) and value != value):  # parquet writes a missing one as NaN
        if answer_type == "float":
            raise ValueError(f"{where}: answer_type 'float' needs a precision (decimal places)")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}: precision {value!r} is not a whole number of decimal places")
    if float(value) != int(value):
        raise ValueError(f"{where}: precision {value!r} is not a whole number of decimal places")
    return int(value)


def mathvista_row(row: dict[str, Any], index: int, source: str, image_dir: str | Path | None = None) -> Sample:
    """One published row -> Sample; ValueError naming the file, row and field for anything it cannot use."""
    pid = row.get("pid", row.get("_key"))
    where = row_where(source, index, pid)
    if pid is None:
        raise ValueError(f"{where}: no 'pid' field")
    question = text_field(row, "question", where)
    answer = text_field(row, "answer", where)
    qtype, atype = row.get("question_type"), row.get("answer_type")
    if qtype not in QUESTION_TYPES:
        raise ValueError(f"{where}: question_type {qtype!r} is not one of {', '.join(QUESTION_TYPES)}")
    if atype not in ANSWER_TYPES:
        raise ValueError(f"{where}: answer_type {atype!r} is not one of {', '.join(ANSWER_TYPES)}")
    choices = row.get("choices")
    if qtype == "multi_choice":
        if not isinstance(choices, (list, tuple)) or not choices:
            raise ValueError(f"{where}: a multi_choice question needs a non-empty 'choices' list, got {choices!r}")
        choices = [str(c) for c in choices]
        if len(choices) > MAX_CHOICES:
            raise ValueError(f"{where}: choices has {len(choices):,} options, over the cap of {MAX_CHOICES} (A..Z)")
        longest = max(range(len(choices)), key=lambda k: len(choices[k]))
        if len(choices[longest]) > MAX_CHOICE_CHARS:
            raise ValueError(
                f"{where}: choices[{longest}] has {len(choices[longest]):,} characters, over the cap of "
                f"{MAX_CHOICE_CHARS:,} (MAX_CHOICE_CHARS in tasks/mathvista/data.py)"
            )
    elif atype == "text":
        raise ValueError(
            f"{where}: answer_type 'text' with question_type 'free_form' has no normalization "
            "rule in the benchmark's calculate_score.py"
        )
    else:
        choices = None
    precision = _precision(row.get("precision"), where, atype)
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: metadata is a {type(metadata).__name__}, not an object")
    folder = Path(image_dir) if image_dir else Path(source).parent
    image = image_field(row.get("decoded_image"), folder, where, "decoded_image") or image_field(
        row.get("image"), folder, where, "image"
    )
    query = row.get("query") or build_query(
        question, choices=choices, unit=row.get("unit"), question_type=qtype, answer_type=atype, precision=precision
    )
    content = ([{"type": "image"}] if image is not None else []) + [{"type": "text", "text": str(query)}]
    meta = {
        "pid": str(pid),
        "question_type": qtype,
        "answer_type": atype,
        "choices": choices,
        "precision": precision,
        "unit": row.get("unit"),
        "question": question,
        **{k: metadata.get(k) for k in METADATA if metadata.get(k) is not None},
    }
    if isinstance(meta.get("skills"), tuple):
        meta["skills"] = list(meta["skills"])
    return Sample(
        id=str(pid),
        messages=[{"role": "user", "content": content}],
        answer=answer,
        images=[image] if image is not None else [],
        meta=meta,
        task="mathvista",
    )


EXTRACTORS = ("rule", "judge")


def mathvista_load(
    path: str | None,
    split: str = "eval",
    *,
    image_dir: str | None = None,
    extractor: str = "rule",
    judge: str | None = None,
    judge_device: str = "cpu",
    judge_dtype: str = "float32",
    **_: Any,
) -> Loaded:
    """The rows of ``path`` (a testmini.json / test.json, a parquet file or a folder of them) as samples.
    ``extractor``: ``rule`` (default) or ``judge`` (the model directory ``judge``, on ``judge_device``)."""
    if path is None:
        raise ValueError(
            "mathvista reads the benchmark's own files: --tasks mathvista:PATH/testmini.json "
            "(or data.train_path); it has no built-in data"
        )
    if extractor not in EXTRACTORS:
        raise ValueError(f"mathvista: task_args extractor={extractor!r} is not one of {', '.join(EXTRACTORS)}")
    if extractor == "judge" and not judge:
        raise ValueError(
            "mathvista: task_args extractor=judge needs judge=PATH (a model directory, as the vlm_judge reward's model)"
        )
    if extractor == "judge" and not Path(judge).exists():
        raise FileNotFoundError(f"mathvista: task_args judge={judge!r} does not exist")
    loaded = Loaded(extraction=extraction_note(extractor))
    for index, (row, source) in enumerate(table_rows(path, "mathvista")):
        sample = mathvista_row(row, index, source, image_dir)
        sample.meta["extractor"] = extractor
        if extractor == "judge":
            sample.meta.update(judge=str(judge), judge_device=judge_device, judge_dtype=judge_dtype)
        loaded.append(sample)
    return loaded


def extraction_note(extractor: str) -> str:
    if extractor == "judge":
        return (
            "answers extracted by the judge model (task_args extractor=judge), in place of the paper's GPT-4 extraction"
        )
    return (
        "answers extracted by rule (<answer>, \\boxed{}, 'the answer is', option letter, last number), not "
        "by the paper's GPT-4 extraction; task_args extractor=judge uses a judge model"
    )
