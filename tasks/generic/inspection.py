"""`mmreason data inspect PATH`: what the generic pack reads from a dataset, before any training.

The detected format and its column map, the row count, media per row (min / median / max), the answer kinds
and the reward each gets, one prompt rendered exactly as the model sees it (chat template applied, visual
placeholders shown), and every problem found (file, row, field): rows the loader refuses, and the media a run
would skip: files that are missing, images that do not decode or whose shape the processor refuses (an aspect
ratio over 200, e.g. 60000 x 1), videos whose container does not open as a video (a text file) or that are a
still picture (a PNG given as a video). Exit 1 when there is a problem.
"""

from __future__ import annotations

import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import mmreason.models as models
from mmreason.media import MediaError
from mmreason.media.budget import IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS, VIDEO_MAX_PIXELS, VIDEO_MIN_PIXELS, smart_resize
from mmreason.media.errors import require_file
from mmreason.media.image import load_image
from mmreason.media.video import probe_video
from mmreason.tasks.generic.answers import REWARD_OF_KIND
from mmreason.tasks.generic.data import Reader, iter_rows
from mmreason.tasks.generic.formats import detect
from mmreason.tasks.generic.storage import open_source
from mmreason.types import Sample

MAX_SHOWN = 50  # problem lines printed (all are counted)


def inspect_dataset(
    path: str,
    *,
    format: str | None = None,
    columns: dict[str, str] | None = None,
    prompt_template: str = "plain",
    limit: int | None = None,
    decode: bool = True,
    processor: Any = None,
) -> dict[str, Any]:
    """The report of ``path`` as a dict (``render`` prints it)."""
    source = open_source(path)
    fmt, cols = detect(source.columns, label=source.label, forced=format, renames=columns)
    reader = Reader(source, fmt, cols, prompt_template)
    images, videos, kinds, problems, first = [], [], Counter(), [], None
    for index, row in iter_rows(source.rows, limit):
        found = reader.problems(row, index)
        if not found:
            sample = reader.sample(row, index)
            first = first or sample
            images.append(len(sample.images))
            videos.append(len(sample.videos))
            kinds[sample.meta["answer_kind"]] += 1
            found = media_problems(reader, sample, index, row, decode)
        problems.extend(found)
    return {
        "path": path,
        "format": fmt.name,
        "storage": source.storage,
        "rows": source.num_rows,
        "columns": cols,
        "images": spread(images),
        "videos": spread(videos),
        "answer_kinds": {k: {"rows": n, "reward": REWARD_OF_KIND[k]} for k, n in kinds.most_common()},
        "prompt": rendered(first, processor) if first else None,
        "problems": problems,
    }


def media_problems(reader: Reader, sample: Sample, index: int, row: dict, decode: bool) -> list[str]:
    """The media a run would skip, one line each (file, row, field): missing files, images that do not decode
    or have a shape the processor refuses, videos that do not open or are a still picture."""
    out = []
    for role, refs in (("images", sample.images), ("videos", [v.path for v in sample.videos])):
        field = reader.cols.get(role, reader.cols.get("media", role))
        for k, ref in enumerate(refs):
            try:
                if role == "images" and decode:
                    check_image(ref)
                elif isinstance(ref, str):
                    require_file(ref, role[:-1])
                    if role == "videos" and decode:
                        check_video(ref)
            except (MediaError, OSError, ValueError, TypeError) as err:
                out.append(f"{reader.where(index, row)}: field {field!r}[{k}]: {err}")
    return out


def check_image(ref: Any) -> None:
    """MediaError when the image does not decode or has a shape the processor refuses (aspect ratio over 200)."""
    image = load_image(ref)
    try:
        smart_resize(image.height, image.width, min_pixels=IMAGE_MIN_PIXELS, max_pixels=IMAGE_MAX_PIXELS)
    except ValueError as err:
        raise MediaError(ref if isinstance(ref, str) else "<bytes>", str(err), "image") from None


STILL_FORMATS = ("image2", "png_pipe", "jpeg_pipe", "webp_pipe", "bmp_pipe", "gif", "tiff_pipe")


def check_video(path: str) -> None:
    """MediaError when ``path`` does not open as a video (its header, nothing decoded), is a still picture
    (FFmpeg reads a PNG as a one-frame video: a run shows the model a still), or has frames the processor
    refuses (an aspect ratio over 200)."""
    import av

    info = probe_video(path)
    try:
        with av.open(path) as container:
            kind = container.format.name
    except Exception:  # probe_video opened it with another backend: no container name to check
        kind = ""
    if any(name in STILL_FORMATS for name in kind.split(",")):
        raise MediaError(path, f"a still picture ({kind}), not a video: give it as an image", "video")
    try:
        smart_resize(info.height, info.width, min_pixels=VIDEO_MIN_PIXELS, max_pixels=VIDEO_MAX_PIXELS)
    except ValueError as err:
        raise MediaError(path, str(err), "video") from None


def spread(counts: list[int]) -> dict[str, float]:
    if not counts:
        return {"min": 0, "median": 0, "max": 0}
    return {"min": min(counts), "median": statistics.median(counts), "max": max(counts)}


def rendered(sample: Sample, processor: Any = None) -> str:
    """The prompt text the model gets: the model's chat template (``processor``), else the built-in Qwen2.5-VL
    template of the tiny model, with its visual placeholders."""
    if processor is not None:
        return processor.apply_chat_template(sample.messages, add_generation_prompt=True, tokenize=False)
    from mmreason import templating

    text = (Path(models.__file__).parent / "chat_template.jinja").read_text(encoding="utf-8")
    chat = templating.compile_template(text, strict=False)
    return templating.render(chat, {"messages": sample.messages, "add_generation_prompt": True})


def render(report: dict[str, Any]) -> str:
    cols = ", ".join(f"{role}={col}" for role, col in report["columns"].items())
    lines = [
        f"{report['path']}: format {report['format']} ({report['storage']}), {report['rows']:,} rows",
        f"columns: {cols}",
        "images per row: min {min} / median {median} / max {max}".format(**report["images"]),
        "videos per row: min {min} / median {median} / max {max}".format(**report["videos"]),
        "answer kinds: "
        + (
            ", ".join(f"{k} {v['rows']} -> reward {v['reward']}" for k, v in report["answer_kinds"].items()) or "(none)"
        ),
    ]
    if report["prompt"] is not None:
        lines += ["prompt of the first good row, as the model sees it:", report["prompt"].rstrip("\n")]
    problems = report["problems"]
    lines.append(f"problems: {len(problems)}" + (" (none)" if not problems else ""))
    lines += problems[:MAX_SHOWN]
    if len(problems) > MAX_SHOWN:
        lines.append(f"... and {len(problems) - MAX_SHOWN} more")
    return "\n".join(lines)
