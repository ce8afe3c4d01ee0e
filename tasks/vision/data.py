"""Data of the vision pack: multi-domain visual QA rows, from a file or built from easy-VQA / the generator.

Row shape (JSONL or parquet, values kept as written: ``mmreason.rows``)::

    {"id": str, "image": path | "images": [paths], "question": str, "answer": str,
     "answer_type": "mcq" | "numeric" | "free-form" | "yes/no", "domain": "perception" | "reasoning" | "chart" | ...,
     "choices": [str] (mcq only, optional), "trace": str (optional reasoning for SFT), ...any other column}

Relative image paths are relative to the file. Every column but id/image(s)/question/answer goes to
``Sample.meta`` (rewards see it as a column). The loader adds ``length_profile`` from the domain
(perception -> "perception", chart -> "hybrid", reasoning -> "reasoning") so the ``length_trapezoid``
reward shapes each domain with its own trapezoid, and ``target`` (the SFT text) from ``answer_format``.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from mmreason.rows import check_count
from mmreason.rows import read_rows as rows_of
from mmreason.tasks.vision import easyvqa, synth
from mmreason.tasks.vision.ton import apply_thought_dropout, think_answer
from mmreason.types import Sample

ANSWER_TYPES = ("mcq", "numeric", "free-form", "yes/no")
SOURCES = ("easyvqa", "synthetic", "mixed")
FORMATS = ("plain", "think")
LENGTH_PROFILE_OF_DOMAIN = {"perception": "perception", "chart": "hybrid", "reasoning": "reasoning"}
LETTERS = "ABCDEFGHIJ"

INSTRUCTION = {
    "plain": "Answer with a single word or number.",
    "plain_mcq": "Answer with the option's letter.",
    "think": (
        "Think inside <think> </think> (leave it empty if the answer is obvious), then give the final "
        "answer inside <answer> </answer>."
    ),
}


def default_cache() -> Path:
    return Path(os.environ.get("MMREASON_CACHE", Path.home() / ".cache" / "mmreason")) / "vision"


def prompt_text(row: dict[str, Any], answer_format: str = "plain") -> str:
    """The user text: question, lettered options for mcq, and the answer-format instruction."""
    text = str(row["question"])
    choices = row.get("choices")
    if row.get("answer_type") == "mcq" and choices:
        text += "\nOptions: " + " ".join(f"({LETTERS[k]}) {c}" for k, c in enumerate(choices))
    if answer_format == "think":
        return f"{text}\n{INSTRUCTION['think']}"
    return f"{text}\n{INSTRUCTION['plain_mcq' if row.get('answer_type') == 'mcq' else 'plain']}"


def row_to_sample(row: dict[str, Any], source: str, answer_format: str = "plain") -> Sample:
    """One row -> Sample; a missing or invalid column raises ValueError naming the file and row."""
    where = f"{source}: row {row.get('id', '?')!r}"
    for key in ("id", "question", "answer"):
        if row.get(key) is None:
            raise ValueError(f"{where} has no {key!r} column")
    images = row.get("images") or ([row["image"]] if row.get("image") else [])
    if not images:
        raise ValueError(f"{where} has no 'image' or 'images' column")
    check_count(where, "choices", row.get("choices"), len(LETTERS), "options A..J")
    kind = row.get("answer_type") or "free-form"
    if kind not in ANSWER_TYPES:
        raise ValueError(f"{where}: answer_type {kind!r} is not one of {', '.join(ANSWER_TYPES)}")
    if kind == "mcq" and row.get("choices") and str(row["answer"]).upper() not in LETTERS[: len(row["choices"])]:
        raise ValueError(f"{where}: mcq answer {row['answer']!r} is not an option letter")
    base = Path(source).parent
    images = [str(base / p) if isinstance(p, str) and not os.path.isabs(p) else p for p in images]
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": prompt_text(row, answer_format)}]
    # a column absent from this row reads as None when ``datasets`` unifies the file's schema: leave it out
    meta = {k: v for k, v in row.items() if k not in ("id", "image", "images", "question", "answer") and v is not None}
    meta["answer_type"] = kind
    meta.setdefault("domain", "perception")
    profile = LENGTH_PROFILE_OF_DOMAIN.get(str(meta["domain"]))
    if profile and not meta.get("length_profile"):
        meta["length_profile"] = profile
    answer = str(row["answer"])
    meta["answer_format"] = answer_format
    if answer_format == "think":
        meta["target"] = think_answer(str(meta.get("trace") or ""), answer)
    return Sample(
        id=str(row["id"]),
        messages=[{"role": "user", "content": content}],
        answer=answer,
        images=images,
        meta=meta,
        task="vision",
    )


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The file's rows, every value as written (``mmreason.rows``: an answer "007" stays "007")."""
    return rows_of(path, "vision")


def synthetic_rows(
    split: str, n: int, seed: int, size: int = 112, kinds: list[str] | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Generated rows (cached per split/n/seed/size/kinds) and the JSONL they came from."""
    kinds = list(kinds or synth.KINDS)
    split_seed = seed if split == "train" else seed + 10_000
    folder = default_cache() / f"synthetic-{split}-{n}-{split_seed}-{size}-{'_'.join(kinds)}"
    jsonl = synth.generate(folder, n, split_seed, size, kinds)
    return read_rows(jsonl), str(jsonl)


def _subset(rows: list[dict[str, Any]], n: int | None, seed: int) -> list[dict[str, Any]]:
    """A seeded random subset of ``n`` rows (all rows, in their order, when n is None)."""
    if n is None or n >= len(rows):
        return rows
    picked = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in picked]


def vision_load(
    path: str | None = None,
    split: str = "train",
    *,
    source: str = "mixed",
    n: int | None = None,
    synthetic_n: int | None = None,
    seed: int = 0,
    kinds: list[str] | None = None,
    domains: list[str] | None = None,
    answer_format: str = "plain",
    thought_dropout: float = 0.0,
    image_size: int = 112,
    templates: list[str] | None = None,
) -> list[Sample]:
    """The pack's data (``data.task_args`` are these keyword options).

    path: a JSONL/parquet file in the row shape above; None = built-in data from ``source``:
        ``easyvqa`` (the installed package; train -> its train split, eval/test -> its test split),
        ``synthetic`` (generated counting / colour / chart / geometry items) or ``mixed`` (both).
    n: a seeded random subset of the easy-VQA (or file) rows; synthetic_n: generated items
        (default 2,000 train / 200 otherwise); kinds: synthetic kinds; domains: keep only these domains.
    answer_format: ``plain`` (answer only) | ``think`` (``<think>trace</think><answer>a</answer>`` targets);
    thought_dropout: TON's p, with ``think`` (the empty thought replaces the trace with probability p).
    templates: keep only questions whose template starts with one of these prefixes (e.g. ["what"]: the
        easy-VQA colour and shape questions, a curriculum stage that can only be answered from the image).
    """
    if answer_format not in FORMATS:
        raise ValueError(f"vision: answer_format {answer_format!r} is not one of {FORMATS}")
    if thought_dropout and answer_format != "think":
        raise ValueError("vision: thought_dropout needs answer_format: think (it drops the <think> trace)")
    samples: list[Sample] = []
    if path is not None:
        samples = [row_to_sample(r, str(path), answer_format) for r in _subset(read_rows(path), n, seed)]
    else:
        if source not in SOURCES:
            raise ValueError(f"vision: source {source!r} is not one of {SOURCES}")
        if source in ("easyvqa", "mixed"):
            rows = _subset(easyvqa.easyvqa_rows(split), n, seed + (0 if split == "train" else 1))
            samples += [row_to_sample(r, "easy-vqa", answer_format) for r in rows]
        if source in ("synthetic", "mixed"):
            count = synthetic_n if synthetic_n is not None else (2000 if split == "train" else 200)
            if count:
                rows, origin = synthetic_rows(split, count, seed, image_size, kinds)
                samples += [row_to_sample(r, origin, answer_format) for r in rows]
    if domains is not None:
        samples = [s for s in samples if s.meta.get("domain") in set(domains)]
    if templates is not None:
        samples = [s for s in samples if str(s.meta.get("template", "")).startswith(tuple(templates))]
    if thought_dropout:
        samples = apply_thought_dropout(samples, thought_dropout, seed)
    return samples
