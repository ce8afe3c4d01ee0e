"""Video-MME's example layout (``mmreason data examples --layouts videomme``), as the Hugging Face repository
lays it out: ``Video-MME/videomme/test-00000-of-00001.parquet`` (the annotation), ``Video-MME/data/{videoID}.mp4``
and ``Video-MME/subtitle/{videoID}.srt``; a clip per row, its question the moving shapes' colour (A-D)."""

from __future__ import annotations

from pathlib import Path

from mmreason.examples import Scene, colour_options, write_clip, write_parquet

SRT = """1
00:00:00,000 --> 00:00:01,000
<font color="white" size=".72c">look at the {shape}s</font>

2
00:00:01,000 --> 00:00:02,000
<font color="white" size=".72c">they move to the right</font>
"""


def videomme(out: Path, drawn: list[Scene]) -> Path:
    root = out / "Video-MME"
    (root / "subtitle").mkdir(parents=True, exist_ok=True)
    options = [f"{letter}. {colour}" for letter, colour in zip("ABCD", colour_options())]
    rows = []
    for k, scene in enumerate(drawn):
        vid = f"example{k:03d}"
        write_clip(root / "data" / f"{vid}.mp4", scene)
        (root / "subtitle" / f"{vid}.srt").write_text(SRT.format(shape=scene.shape))
        rows.append(
            {
                "video_id": f"{k + 1:03d}",
                "duration": "short",
                "domain": "Knowledge",
                "sub_category": "Shapes",
                "url": f"https://example.org/{vid}",
                "videoID": vid,
                "question_id": f"{k + 1:03d}-1",
                "task_type": "Object Recognition",
                "question": "What colour are the moving shapes?",
                "options": options,
                "answer": scene.letter,
            }
        )
    return write_parquet(root / "videomme" / "test-00000-of-00001.parquet", rows)


LAYOUTS = {"videomme": videomme}
