"""MMMU's Hugging Face parquet layout as published, one folder per subject (``Accounting/validation-*.parquet``)
or all together, and MMMU-Pro's two settings.

    MMMU:      {"id": "validation_Art_1", "question": "... <image 1> ...", "options": "['a', 'b', ...]",
                "explanation": str, "image_1": {"bytes", "path"}, ..., "image_7": ..., "img_type": "['Paintings']",
                "answer": "B" (open: the answer text), "topic_difficulty": "Easy" | "Medium" | "Hard",
                "question_type": "multiple-choice" | "open", "subfield": str}
               (MMMU's own eval files write "short-answer": every question type but "multiple-choice" is
               open, as its ``eval_utils.py`` and ``main_eval_only.py`` treat them)
    MMMU-Pro:  standard (10 options): the same columns without ``question_type`` (all multiple-choice) and with
               ``subject``; vision: ``{"id", "image" (the question as a screenshot), "options", "answer",
               "subject"}``.

The subject is the row's ``subject`` or the middle of its id (``validation_Art_Theory_3`` -> ``Art_Theory``, as
MMMU's ``main_eval_only.py`` groups), its discipline the MMMU group of that subject. ``<image N>`` in the
question and options marks where ``image_N`` goes: the prompt interleaves the images at their tags (an image
no tag names comes first). Prompts (lmms-eval's ``mmmu`` / ``mmmu_pro`` tasks):
multiple-choice ``{question}\\nA. {option}\\nB. ...\\nAnswer with the option's letter from the given choices
directly.``; open ``{question}\\nAnswer the question using a single word or phrase.``; vision: MMMU-Pro's
instruction alone. ``mmmu_row`` turns one row into a ``Sample``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mmreason.parsing import parse_literal
from mmreason.published_files import Loaded, image_field, row_where, table_rows, text_field
from mmreason.rewards.benchmark_rules import option_list
from mmreason.types import Sample

QUESTION_TYPES = ("multiple-choice", "open")  # as the HF parquet writes them; any other text is open too
MAX_IMAGES = 7
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # letters as the benchmark gives them: A + k (MMMU-Pro has 12-option rows)
MC_INSTRUCTION = "Answer with the option's letter from the given choices directly."
OPEN_INSTRUCTION = "Answer the question using a single word or phrase."
VISION_INSTRUCTION = (
    "Answer with the option letter from the given choices directly. The last line of your "
    "response should be of the following format: 'Answer: $LETTER' (without quotes) where "
    "LETTER is one of options."
)
DISCIPLINES = {  # MMMU's six disciplines and their subjects (its data_utils.py groups results so)
    "Art and Design": ("Art", "Art_Theory", "Design", "Music"),
    "Business": ("Accounting", "Economics", "Finance", "Manage", "Marketing"),
    "Science": ("Biology", "Chemistry", "Geography", "Math", "Physics"),
    "Health and Medicine": (
        "Basic_Medical_Science",
        "Clinical_Medicine",
        "Diagnostics_and_Laboratory_Medicine",
        "Pharmacy",
        "Public_Health",
    ),
    "Humanities and Social Science": ("History", "Literature", "Sociology", "Psychology"),
    "Tech and Engineering": (
        "Agriculture",
        "Architecture_and_Engineering",
        "Computer_Science",
        "Electronics",
        "Energy_and_Power",
        "Materials",
        "Mechanical_Engineering",
    ),
}
DISCIPLINE_OF = {s: d for d, subjects in DISCIPLINES.items() for s in subjects}
_TAG = re.compile(r"<image (\d+)>")
_ID = re.compile(r"^[^_]+_(.+)_\d+$")


def subject_of(row: dict[str, Any], rid: str) -> str | None:
    if row.get("subject"):
        return str(row["subject"]).replace(" ", "_")
    m = _ID.match(rid)
    return m.group(1) if m else None


def interleave(text: str, images: dict[int, Any], where: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """(content items with an image item at each ``<image N>`` tag, the images in that order); images no tag
    names come first; a tag naming an empty ``image_N`` stays in the text."""
    content: list[dict[str, Any]] = []
    ordered: list[Any] = []
    named = {int(n) for n in _TAG.findall(text)} & set(images)
    for n in sorted(set(images) - named):
        content.append({"type": "image"})
        ordered.append(images[n])
    pos = 0
    for m in _TAG.finditer(text):
        n = int(m.group(1))
        if n not in images:  # the text names an image the row does not hold (MMMU has such rows): left as text
            continue
        if text[pos : m.start()]:
            content.append({"type": "text", "text": text[pos : m.start()]})
        content.append({"type": "image"})
        ordered.append(images[n])
        pos = m.end()
    if text[pos:]:
        content.append({"type": "text", "text": text[pos:]})
    return content, ordered


def gold_answer(value: Any, question_type: str, n_options: int, where: str) -> Any:
    """A letter for multiple-choice (checked against the options); an open answer's text, or its list when the
    answer is written as one ("['24/7', '3.429']")."""
    if question_type == "multiple-choice":
        letter = str(value).strip()
        if (
            len(letter) != 1 or letter not in LETTERS
        ):  # a letter past the options is kept (and counted by the loader): never right
            raise ValueError(f"{where}: answer {value!r} is not an option letter A to {LETTERS[-1]}")
        return letter
    if isinstance(value, list):
        return [str(v) for v in value]
    text = str(value)
    parsed = parse_literal(text) if text.strip().startswith("[") else None
    return [str(v) for v in parsed] if isinstance(parsed, list) else text


def mmmu_row(row: dict[str, Any], index: int, source: str, setting: str = "auto") -> Sample:
    """One published row (MMMU or MMMU-Pro) -> Sample; ValueError naming the file, row and field otherwise."""
    rid = text_field(row, "id", row_where(source, index, row.get("id")))
    where = row_where(source, index, rid)
    qtype = row.get("question_type", "multiple-choice")  # MMMU-Pro has no question_type: all multiple-choice
    if not isinstance(qtype, str) or not qtype.strip():
        raise ValueError(f"{where}: question_type {qtype!r} is not multiple-choice, open or short-answer")
    # kept as written (the breakdown shows it); MMMU's eval_utils.py: every type but multiple-choice is open
    options = option_list(row.get("options"), where) if qtype == "multiple-choice" else []
    if qtype == "multiple-choice" and not 1 <= len(options) <= len(LETTERS):  # MMMU-Pro has a one-option row
        raise ValueError(f"{where}: {len(options)} options (multiple-choice needs 1 to {len(LETTERS)})")
    base = Path(source).parent
    vision = setting == "vision" or (setting == "auto" and row.get("image") is not None and not row.get("question"))
    if vision:
        image = image_field(row.get("image"), base, where, "image")
        if image is None:
            raise ValueError(f"{where}: the vision setting needs an 'image' (the question's screenshot)")
        content, images = [{"type": "image"}, {"type": "text", "text": VISION_INSTRUCTION}], [image]
    else:
        question = text_field(row, "question", where)
        found = {n: image_field(row.get(f"image_{n}"), base, where, f"image_{n}") for n in range(1, MAX_IMAGES + 1)}
        text = question + "".join(f"\n{LETTERS[k]}. {o}" for k, o in enumerate(options))
        text += "\n" + (MC_INSTRUCTION if qtype == "multiple-choice" else OPEN_INSTRUCTION)
        content, images = interleave(text, {n: v for n, v in found.items() if v is not None}, where)
    subject = subject_of(row, rid)
    meta = {
        "question_type": qtype,
        "options": options,
        "subject": subject,
        "benchmark": "MMMU" if "question_type" in row else "MMMU-Pro",
        "discipline": DISCIPLINE_OF.get(subject or ""),
        "setting": "vision" if vision else "standard",
        **{k: row[k] for k in ("subfield", "topic_difficulty", "img_type") if row.get(k) not in (None, "")},
    }
    answer = gold_answer(text_field(row, "answer", where), qtype, len(options), where)
    return Sample(
        id=rid, messages=[{"role": "user", "content": content}], answer=answer, images=images, meta=meta, task="mmmu"
    )


SETTINGS = ("auto", "standard", "vision")


def mmmu_load(
    path: str | None,
    split: str = "eval",
    *,
    setting: str = "auto",
    seed: int = 42,
    benchmark: str | None = None,
    **_: Any,
) -> Loaded:
    """The rows of ``path`` (a parquet / JSON file or a folder of them) as samples. ``setting``: MMMU-Pro's
    ``standard`` or ``vision`` (``auto``: vision for rows with an ``image`` and no ``question``); ``seed``: the
    seed of the multiple-choice parser's random fallback (MMMU's is 42); ``benchmark``: whose parser scores the
    rows (default: MMMU-Pro's for rows without ``question_type``, MMMU's for the others)."""
    if path is None:
        raise ValueError(
            "mmmu reads the benchmark's own files: --tasks mmmu:PATH (a parquet file or a folder of "
            "them); it has no built-in data"
        )
    if setting not in SETTINGS:
        raise ValueError(f"mmmu: task_args setting={setting!r} is not one of {', '.join(SETTINGS)}")
    if benchmark not in (None, "MMMU", "MMMU-Pro"):
        raise ValueError(f"mmmu: task_args benchmark={benchmark!r} is not MMMU or MMMU-Pro (whose parser to use)")
    loaded = Loaded(
        extraction="MMMU's parse_multi_choice_response / parse_open_response rules on the response "
        "(its <answer> or \\boxed{} body when it has one); random fallback seeded "
        f"({seed}) per question, counted in random_fallback"
    )
    outside = []
    for index, (row, source) in enumerate(table_rows(path, "mmmu")):
        sample = mmmu_row(row, index, source, setting)
        sample.meta["fallback_seed"] = int(seed)
        if benchmark is not None:
            sample.meta["benchmark"] = benchmark
        loaded.append(sample)
        if (
            sample.meta["question_type"] == "multiple-choice"
            and sample.answer not in LETTERS[: len(sample.meta["options"])]
        ):
            outside.append(sample.id)
    if outside:
        loaded.notes.append(
            f"{len(outside)} questions whose answer letter is past their options, never right as "
            f"the benchmark scores them ({', '.join(outside[:5])}{', ...' if len(outside) > 5 else ''})"
        )
    return loaded
