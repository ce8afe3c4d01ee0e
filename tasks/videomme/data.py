"""Video-MME's annotation as published (Fu et al., "Video-MME", CVPR 2025): the Hugging Face parquet
(``videomme/test-00000-of-00001.parquet``) or the same rows as JSON / JSON Lines.

    {"video_id": "001", "videoID": "fFjv93ACGo8", "duration": "short" | "medium" | "long", "domain": str,
     "sub_category": str, "task_type": str, "question_id": "001-1", "question": str,
     "options": ["A. ...", "B. ...", "C. ...", "D. ..."], "answer": "C", "url": str}

The video is ``{video_dir}/{videoID}.mp4`` (``.MP4`` / ``.mkv`` when that is what exists; ``--task_args
video_dir=``, default the annotation's folder, its ``data/`` or ``videos/`` subfolder, or the ``data/`` folder
beside the annotation's folder (the Hugging Face repository: ``videomme/`` beside ``data/``), the first that holds
the video). With ``--task_args subtitles=true`` the subtitles of ``{videoID}.srt`` beside the video (or in
``subtitle_dir``, default a ``subtitle/`` folder in or beside the annotation's folder) go into the prompt, every cue's text in
order (a video without a ``.srt`` gets "No subtitles available", counted in the header). Prompts are the
paper's: ``Select the best answer to the following multiple-choice question based on the video[ and the
subtitles]. Respond with only the letter (A, B, C, or D) of the correct option.\\n{question}\\n{options}\\nThe
best answer is:`` after ``This video's subtitles are listed below:\\n{subtitles}\\n``. lmms-eval keeps only the
cues at the frames it samples; here every cue is kept (the frames are chosen later, by the run's
``video_fps`` / ``video_max_frames``). ``videomme_row`` turns one row into a ``Sample``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mmreason.published_files import Loaded, row_where, table_rows, text_field
from mmreason.rewards.benchmark_rules import option_list
from mmreason.types import Sample, VideoRef

DURATIONS = ("short", "medium", "long")
LETTERS = "ABCD"
PROMPT = (
    "Select the best answer to the following multiple-choice question based on the video{subs}. Respond with "
    "only the letter (A, B, C, or D) of the correct option."
)
NO_SUBTITLES = "No subtitles available"
_TIME = re.compile(r"\d+:\d+:\d+[,.]\d+\s*-->\s*\d+:\d+:\d+[,.]\d+")
_FONT = re.compile(r"<font[^>]*>(.*?)</font>", re.S)
_TAG = re.compile(r"<[^>]+>")


def srt_text(path: Path, max_chars: int = 200_000) -> str:
    """The text of an ``.srt`` file's cues, one line per cue, in order (numbers, times and markup dropped)."""
    raw = path.read_text(encoding="utf-8-sig", errors="replace")[: max_chars * 4]
    lines = []
    for block in re.split(r"\n\s*\n", raw.replace("\r\n", "\n")):
        rows = [r for r in block.strip().split("\n") if r.strip()]
        timed = [k for k, r in enumerate(rows) if _TIME.search(r)]
        if not timed:
            continue
        text = " ".join(rows[timed[0] + 1 :])
        fonts = _FONT.findall(text)
        text = " ".join(fonts) if fonts else _TAG.sub("", text)
        if text.strip():
            lines.append(" ".join(text.split()))
    return "\n".join(lines)[:max_chars]


def video_path(folder: Path, video_id: str) -> Path:
    for ext in (".mp4", ".MP4", ".mkv"):
        if (folder / f"{video_id}{ext}").exists():
            return folder / f"{video_id}{ext}"
    return folder / f"{video_id}.mp4"


def videomme_row(
    row: dict[str, Any],
    index: int,
    source: str,
    *,
    video_dir: str | Path | None = None,
    subtitles: bool = False,
    subtitle_dir: str | Path | None = None,
) -> Sample:
    """One published row -> Sample; ValueError naming the file, row and field otherwise."""
    qid = text_field(row, "question_id", row_where(source, index, row.get("question_id")))
    where = row_where(source, index, qid)
    vid = text_field(row, "videoID", where)
    question = text_field(row, "question", where)
    duration = row.get("duration")
    if duration not in DURATIONS:
        raise ValueError(f"{where}: duration {duration!r} is not one of {', '.join(DURATIONS)}")
    options = option_list(row.get("options"), where)
    if not 2 <= len(options) <= len(LETTERS):
        raise ValueError(f"{where}: {len(options)} options (Video-MME has 2 to {len(LETTERS)}, lettered A-D)")
    answer = text_field(row, "answer", where).strip().upper()
    if answer not in LETTERS[: len(options)]:
        raise ValueError(f"{where}: answer {row['answer']!r} is not one of the option letters")
    base = Path(source).parent
    folder = (
        Path(video_dir)
        if video_dir
        else next(
            (f for f in (base, base / "data", base / "videos", base.parent / "data") if video_path(f, vid).exists()),
            base,
        )
    )
    video = video_path(folder, vid)
    prompt = PROMPT.format(subs=" and the subtitles" if subtitles else "") + f"\n{question}\n" + "\n".join(options)
    prompt += "\nThe best answer is:"
    meta = {
        "question": question,
        "options": options,
        "videoID": vid,
        "video_id": row.get("video_id"),
        **{k: row[k] for k in ("duration", "domain", "sub_category", "task_type") if row.get(k) is not None},
    }
    if subtitles:
        found = next(
            (
                p
                for p in (
                    [Path(subtitle_dir)] if subtitle_dir else [folder, base / "subtitle", base.parent / "subtitle"]
                )
                if (p / f"{vid}.srt").is_file()
            ),
            None,
        )
        text = srt_text(found / f"{vid}.srt") if found else ""
        meta["has_subtitles"] = bool(text)
        prompt = "This video's subtitles are listed below:\n" + (text or NO_SUBTITLES) + "\n" + prompt
    content = [{"type": "video"}, {"type": "text", "text": prompt}]
    return Sample(
        id=qid,
        messages=[{"role": "user", "content": content}],
        answer=answer,
        videos=[VideoRef(path=os.path.abspath(video))],
        meta=meta,
        task="videomme",
    )


def _flag(value: Any) -> bool:
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"videomme: task_args subtitles={value!r} is not true or false")
        return value.lower() in ("true", "1", "yes")
    return bool(value)


def videomme_load(
    path: str | None,
    split: str = "eval",
    *,
    video_dir: str | None = None,
    subtitles: Any = False,
    subtitle_dir: str | None = None,
    **_: Any,
) -> Loaded:
    """The rows of ``path`` as samples (see the module doc)."""
    if path is None:
        raise ValueError(
            "videomme reads the benchmark's own files: --tasks videomme:PATH (the annotation "
            "parquet); it has no built-in data"
        )
    with_subs = _flag(subtitles)
    loaded = Loaded(
        extraction="Video-MME's option-letter rule (answer phrases removed, the first capital A-D) on "
        "the response's <answer> or \\boxed{} body when it has one, else the whole response"
    )
    for index, (row, source) in enumerate(table_rows(path, "videomme")):
        loaded.append(
            videomme_row(row, index, source, video_dir=video_dir, subtitles=with_subs, subtitle_dir=subtitle_dir)
        )
    if with_subs:
        videos = {s.meta["videoID"]: s.meta["has_subtitles"] for s in loaded}
        loaded.notes.append(f"with subtitles: {sum(videos.values())} of {len(videos)} videos have a .srt")
    return loaded
