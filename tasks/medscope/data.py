"""Data of the MedScope pack: a loader for clinical-video rows and the generated default splits.

Row shape (JSONL or parquet, read through ``datasets``)::

    {"id": str, "video": path, "question": str,
     "task_type": "qa" | "temporal_grounding" | "grounded_qa",
     "answer": str,                      # qa / grounded_qa: an option letter (or option text), a number or a word;
                                         # temporal_grounding: "[start, end]" seconds (a list works too)
     "options": [str] (optional),        # multiple choice: the answer is a letter A.. or one option's text
     "evidence_windows": [[start, end], ...] seconds (where the answer can be seen), ...any other column}

Relative video paths resolve against the data file. The first turn shows the question and a sparse global
view: ``global_frames`` (16) frames spread over the whole video, at the run's per-frame pixel budget, with
their timestamps written in the text (read from the video header at load time, so a missing or unreadable
video is an error here naming the row). ``global_view: video`` shows them as one clip and lists the times;
``global_view: frames`` shows each frame as an image right after its own time, so which frame showed what
is local in the prompt (the frames are decoded once per video into the cache). Every other column goes to
``Sample.meta``; the loader adds ``span`` (the evidence windows, which the grounding rewards read),
``duration``, ``global_times``, ``video_path``, ``answer_kind`` (mcq / numeric / free / span), ``choices``,
``tool_limits`` and ``target`` (the tool trajectory SFT imitates).
A bad row raises ValueError naming the file, the row index and its id.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from mmreason.media import MediaError, load_video, plan_frames, probe_video
from mmreason.parsing import parse_number
from mmreason.paths import cache_dir
from mmreason.rows import LETTERS, check_count, gold_letter, parse_pair, read_rows, require_text, shape_of
from mmreason.rows import where as row_where
from mmreason.tasks.medscope import synth
from mmreason.tasks.medscope.echo import echo_rows
from mmreason.tasks.medscope.env import TOOL_HINT, ToolLimits
from mmreason.tasks.medscope.trajectories import gold_trajectory
from mmreason.types import Sample, VideoRef

TASK_TYPES = synth.TASK_TYPES
GLOBAL_FRAMES = 16
GLOBAL_VIEWS = ("video", "frames")
TRAIN_VIDEOS, EVAL_VIDEOS = 64, 16
MAX_EVIDENCE_WINDOWS = 32  # evidence windows per row; more is refused (each is scored against every span)
MAX_DURATION = 86_400.0  # a row's ``duration`` in seconds: finite, > 0 and at most a day
AVOID_TRAIN = 2_000  # a held-out split never holds one of the first this-many train videos of its seed
DATA_VERSION = 1
INSTRUCTION = {
    "mcq": "Give the moment as <span>[start, end]</span>, then the option's letter in <answer></answer>.",
    "numeric": "Give the moment as <span>[start, end]</span>, then a number in <answer></answer>.",
    "free": "Give the moment as <span>[start, end]</span>, then one word in <answer></answer>.",
    "span": "Answer with <answer>[start, end]</answer> in seconds.",
}


def default_cache() -> Path:
    return cache_dir("medscope")


def global_timestamps(path: str, frames: int) -> tuple[list[float], float]:
    """Timestamps of the global view's frames and the video's length, from the header alone."""

    info = probe_video(path)
    indices = plan_frames(info, num_frames=min(frames, info.num_frames))
    return [i / info.fps for i in indices], info.num_frames / info.fps


def global_frame_files(path: str, frames: int) -> list[str]:
    """The global view's frames as PNG files (the ``frames`` view), decoded once per video and kept in the
    cache, named after the video's path, size and modification time (a changed video is decoded again)."""
    import hashlib

    stat = os.stat(path)
    key = hashlib.sha1(f"{os.path.abspath(path)}|{stat.st_size}|{stat.st_mtime_ns}|{frames}".encode()).hexdigest()
    folder = default_cache() / "global-frames" / key[:16]
    files = [str(folder / f"{k:02d}.png") for k in range(frames)]
    if all(os.path.exists(f) for f in files):
        return files
    clip = load_video(path, num_frames=frames, max_frames=None)
    folder.mkdir(parents=True, exist_ok=True)
    for image, name in zip(clip.to_pil(), files):
        tmp = f"{name}.{os.getpid()}.tmp"  # processes loading the same video at once never share one
        image.save(tmp, format="PNG")
        os.replace(tmp, name)  # complete or absent
    return files


def prompt_text(
    question: str, kind: str, options: list[str] | None, stamps: list[float], duration: float, view: str = "video"
) -> str:
    lines = [question]
    if options:
        lines.append("Options: " + " ".join(f"({LETTERS[k]}) {o}" for k, o in enumerate(options)))
    if view == "frames":
        lines.append(f"The video is {duration:.1f} s long; you see {len(stamps)} frames of it, each after its time.")
    else:
        lines.append(
            f"The video is {duration:.1f} s long; you see {len(stamps)} frames of it at t = "
            + ", ".join(f"{t:.1f}" for t in stamps)
            + " s."
        )
    lines.append(TOOL_HINT)
    lines.append(INSTRUCTION[kind])
    return "\n".join(lines)


def _windows(value: Any, where: str) -> list[list[float]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(
                f"{where}: evidence_windows {shape_of(value)} is not a JSON list of [start, end]"
            ) from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{where}: evidence_windows must be a non-empty list of [start, end] seconds")
    pairs = [value] if not isinstance(value[0], (list, tuple, str)) else list(value)
    check_count(
        where, "evidence_windows", pairs, MAX_EVIDENCE_WINDOWS, "MAX_EVIDENCE_WINDOWS in tasks/medscope/data.py"
    )
    try:
        return [list(parse_pair(p, "evidence window")) for p in pairs]
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _duration(value: Any) -> float | None:
    """A row's stated ``duration`` (seconds): None when absent, else a finite number in (0, MAX_DURATION]."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"duration {shape_of(value)} is not a number of seconds")
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"duration {value!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_DURATION):
        raise ValueError(f"duration {value!r} is not in (0, {MAX_DURATION:g}] seconds")
    return seconds


def _answer(row: dict[str, Any], kind_hint: str, meta: dict[str, Any]) -> tuple[str, str]:
    """(answer, answer_kind) of a row; raises ValueError saying what is wrong."""

    answer, options = row["answer"], row.get("options")
    if kind_hint == "temporal_grounding":
        span = parse_pair(answer, "temporal_grounding answer")
        return f"[{span[0]:g}, {span[1]:g}]", "span"
    if options is not None:
        if not isinstance(options, (list, tuple)) or not 2 <= len(options) <= len(LETTERS):
            raise ValueError(f"options must be a list of 2..{len(LETTERS)} strings, got {shape_of(options)}")
        meta["choices"] = [str(o) for o in options]
        letter = gold_letter(str(answer), meta["choices"])
        if letter is None:
            raise ValueError(f"answer {answer!r} is neither an option letter nor one option's text")
        return letter, "mcq"
    text = str(answer).strip()
    if not text:
        raise ValueError("the answer is empty")
    return text, ("numeric" if parse_number(text) is not None else "free")


def row_to_sample(
    row: dict[str, Any],
    source: str,
    index: int,
    *,
    global_frames: int = GLOBAL_FRAMES,
    global_view: str = "video",
    tool_limits: dict | None = None,
    probe_cache: dict | None = None,
) -> Sample:
    """One row -> Sample; anything wrong raises ValueError naming the file and row."""
    where = row_where(source, index, row)
    if global_view not in GLOBAL_VIEWS:
        raise ValueError(f"medscope: global_view {global_view!r} is not one of {', '.join(GLOBAL_VIEWS)}")
    for key in ("id", "video", "question", "answer", "task_type", "evidence_windows"):
        if row.get(key) is None or row.get(key) == "":
            raise ValueError(f"{where} has no {key!r} column")
    require_text(where, row, ("id", "video", "question", "task_type"), numbers=("id",))
    check_count(where, "options", row.get("options"), len(LETTERS), "options A..J")
    task_type = str(row["task_type"])
    if task_type not in TASK_TYPES:
        raise ValueError(f"{where}: task_type {task_type!r} is not one of {', '.join(TASK_TYPES)}")
    meta = {k: v for k, v in row.items() if k not in ("id", "video", "question", "answer") and v is not None}
    meta["span"] = _windows(row["evidence_windows"], where)  # its errors name the row already
    try:
        answer, kind = _answer(row, task_type, meta)
        stated = _duration(row.get("duration"))
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None
    path = str(row["video"])
    if not os.path.isabs(path):
        path = str(Path(source).parent / path)
    cache = probe_cache if probe_cache is not None else {}
    if (path, global_view) not in cache:
        try:
            stamps, duration = global_timestamps(path, global_frames)
            files = global_frame_files(path, len(stamps)) if global_view == "frames" else []
        except MediaError as err:
            raise ValueError(f"{where}: {err}") from err
        cache[path, global_view] = stamps, duration, files
    stamps, duration, files = cache[path, global_view]
    meta.update(
        task_type=task_type,
        answer_kind=kind,
        duration=duration if stated is None else stated,
        tool_limits=dict(tool_limits or {}),
        global_times=list(stamps),
        video_path=path,
    )
    ToolLimits.of(meta["tool_limits"])  # unknown keys fail at load, not in the first episode
    text = prompt_text(str(row["question"]), kind, meta.get("choices"), stamps, duration, global_view)
    if global_view == "frames":  # each frame after its timestamp: which frame shows what is local in the text
        content = [item for t in stamps for item in ({"type": "text", "text": f"{t:.1f} s"}, {"type": "image"})]
        media = {"images": files}
    else:
        content, media = [{"type": "video"}], {"videos": [VideoRef(path, num_frames=len(stamps))]}
    messages = [{"role": "user", "content": [*content, {"type": "text", "text": text}]}]
    sample = Sample(id=str(row["id"]), messages=messages, answer=answer, meta=meta, task="medscope", **media)
    meta.setdefault("target", gold_trajectory(sample))
    return sample


def generated_split(split: str, videos: int, seed: int, seconds: tuple[int, int], size: int, scale: int = 1) -> Path:
    """The default data: train from ``seed``; any other split from ``seed + 10_000``, never a video of a
    train split of the same seed and length range (up to ``AVOID_TRAIN`` videos)."""
    tag = f"{seconds[0]}-{seconds[1]}-{size}" + (f"-x{scale}" if scale != 1 else "")
    if split == "train":
        return synth.generate(
            default_cache() / f"v{DATA_VERSION}-train-{videos}-{seed}-{tag}", videos, seed, seconds, size, scale=scale
        )
    avoid = frozenset(synth.procedures(AVOID_TRAIN, seed, seconds))
    folder = default_cache() / f"v{DATA_VERSION}-{split}-{videos}-{seed + 10_000}-{tag}"
    return synth.generate(folder, videos, seed + 10_000, seconds, size, avoid=avoid, scale=scale)


def medscope_load(
    path: str | None = None,
    split: str = "train",
    *,
    n: int | None = None,
    videos: int | None = None,
    eval_videos: int | None = None,
    seed: int = 0,
    seconds: tuple[int, int] | list[int] = (120, 300),
    size: int = 64,
    event_scale: int = 1,
    task_types: list[str] | None = None,
    global_frames: int = GLOBAL_FRAMES,
    global_view: str = "video",
    tool_limits: dict | None = None,
    source: str = "generated",
) -> list[Sample]:
    """The pack's data (``data.task_args`` are these keyword options; training and its eval share them).

    path: a JSONL/parquet file in the row shape above; None = the built-in data: ``source: generated``
        procedure videos (``videos`` for train, default 64, ``eval_videos`` for any other split, default 16,
        3 questions each, ``seconds`` long, ``size`` px, the marker and instrument ``event_scale`` times their
        usual size, cached), or ``source: echo``, the real
        echocardiography cine of pydicom-data with measured answers (``echo.py``).
    n: the first n samples; task_types: keep only these; global_frames: frames of the first-turn view;
    global_view: ``video`` (one clip, the timestamps listed in the text) or ``frames`` (each frame an image
        after its own timestamp; decoded once per video into the cache);
    tool_limits: ``ToolLimits`` fields for the environment (e.g. ``{max_calls: 3}``).
    """
    if task_types is not None and not set(task_types) <= set(TASK_TYPES):
        raise ValueError(f"medscope: task_types {task_types} must be among {', '.join(TASK_TYPES)}")
    if path is None:
        if source == "echo":
            path = str(echo_rows())
        elif source == "generated":
            count = (videos or TRAIN_VIDEOS) if split == "train" else (eval_videos or EVAL_VIDEOS)
            path = str(generated_split(split, count, seed, (int(seconds[0]), int(seconds[1])), size, event_scale))
        else:
            raise ValueError(f"medscope: source {source!r} is not 'generated' or 'echo'")
    probe: dict = {}
    samples = [
        row_to_sample(
            row,
            str(path),
            i,
            global_frames=global_frames,
            global_view=global_view,
            tool_limits=tool_limits,
            probe_cache=probe,
        )
        for i, row in enumerate(read_rows(path, "medscope"))
    ]
    if task_types is not None:
        samples = [s for s in samples if s.meta["task_type"] in task_types]
    return samples[:n] if n else samples
