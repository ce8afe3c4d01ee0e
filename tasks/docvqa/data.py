"""DocVQA and InfographicVQA as published (Mathew et al., WACV 2021 / 2022).

- the RRC JSON: ``{"dataset_name": ..., "data": [{"questionId": int, "question": str, "image":
  "documents/x.png", "docId": int, "answers": [str], "question_types": [str], ...}]}`` (DocVQA; the image
  relative to the JSON's folder) or ``{"data": [{"questionId", "question", "image_local_name": "x.jpeg",
  "answers", "answer_type": [str], "operation/reasoning": [str], ...}]}`` (InfographicVQA; the image in
  ``image_dir``, default the JSON's folder, or its ``infographicsvqa_images/`` subfolder when that exists);
- the ``lmms-lab`` parquet (``DocVQA`` / ``InfoVQA``): the same columns with ``image`` a ``{"bytes", "path"}``
  struct.

The doc id is ``questionId``. A row without answers (the test split: answers are kept by the RRC server) is
skipped and counted ("no answers (test split)"); a row whose ``answers`` is written but empty (``[]``, or only
blank strings) is refused: ANLS against nothing scores every response 0. Prompt (lmms-eval's ``docvqa`` / ``infovqa``):
``{question}\\nAnswer the question using a single word or phrase.`` ``docvqa_row`` turns one row into a
``Sample``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mmreason.published_files import Loaded, image_field, row_where, table_rows, text_field
from mmreason.types import Sample

INSTRUCTION = "Answer the question using a single word or phrase."
LIST_FIELDS = ("question_types", "answer_type", "operation/reasoning")  # the breakdown fields, where present


class NoAnswers(ValueError):
    """A row of the test split: it has no answers to score against."""


def _image(row: dict[str, Any], source: str, image_dir: str | None, where: str) -> Any:
    if "image_local_name" in row and not isinstance(row.get("image"), dict):
        folder = Path(image_dir) if image_dir else Path(source).parent
        if not image_dir and (folder / "infographicsvqa_images").is_dir():
            folder = folder / "infographicsvqa_images"
        return image_field(text_field(row, "image_local_name", where), folder, where, "image_local_name")
    return image_field(row.get("image"), Path(image_dir) if image_dir else Path(source).parent, where, "image")


def docvqa_row(row: dict[str, Any], index: int, source: str, image_dir: str | None = None) -> Sample:
    """One published row -> Sample; ``NoAnswers`` for a test-split row, ValueError naming the file, row and
    field for anything else it cannot use."""
    where = row_where(source, index, row.get("questionId"))
    qid = text_field(row, "questionId", where)
    question = text_field(row, "question", where)
    answers = row.get("answers")
    if answers is None:
        raise NoAnswers(f"{where}: no answers")
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, (list, tuple)) or not all(
        isinstance(a, str) or (isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a))
        for a in answers
    ):
        raise ValueError(f"{where}: answers is not a list of strings")
    if not any(str(a).strip() for a in answers):
        raise ValueError(
            f"{where}: answers is {list(answers)!r}: no answer to score against (every response would score 0)"
        )
    image = _image(row, source, image_dir, where)
    if image is None:
        raise ValueError(f"{where}: no image ('image' or 'image_local_name')")
    meta: dict[str, Any] = {"question": question}
    for key in LIST_FIELDS:
        value = row.get(key)
        if value:
            meta[key] = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value)
    content = [{"type": "image"}, {"type": "text", "text": f"{question}\n{INSTRUCTION}"}]
    return Sample(
        id=qid,
        messages=[{"role": "user", "content": content}],
        answer=[str(a) for a in answers],
        images=[image],
        meta=meta,
        task="docvqa",
    )


def docvqa_load(path: str | None, split: str = "eval", *, image_dir: str | None = None, **_: Any) -> Loaded:
    """The rows of ``path`` (a JSON, parquet file or folder) as samples; test-split rows counted and skipped."""
    if path is None:
        raise ValueError(
            "docvqa reads the benchmark's own files: --tasks docvqa:PATH (val_v1.0.json or a "
            "parquet file); it has no built-in data"
        )
    loaded = Loaded(
        extraction="the response's <answer> or \\boxed{} body when it has one, else the whole "
        "response (DocVQA compares the response as it is)"
    )
    for index, (row, source) in enumerate(table_rows(path, "docvqa")):
        try:
            loaded.append(docvqa_row(row, index, source, image_dir))
        except NoAnswers:
            loaded.skip("no answers (test split: scored by the RRC server)")
    if not loaded:
        raise ValueError(
            f"docvqa data file {path!r}: no row has answers ({sum(loaded.skipped.values())} rows "
            "of the test split; score on the validation split)"
        )
    return loaded
