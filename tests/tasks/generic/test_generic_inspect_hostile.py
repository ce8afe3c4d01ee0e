"""`mmreason data inspect` finds what a run would skip: a video path that is a text file or a still picture, and
an image whose shape the processor refuses (60000 x 1, an aspect ratio over 200), each a line naming the file,
the row and the field, and exit 1."""

from __future__ import annotations

import shutil

from generic_helpers import VIDEO, small_png, write_jsonl
from PIL import Image

from mmreason.cli import main


def test_inspect_names_every_medium_a_run_would_skip(tmp_path, capsys):
    media = tmp_path / "media"
    media.mkdir()
    (media / "notes.txt").write_text("not a video\n" * 20)
    (media / "still.png").write_bytes(small_png("astronaut"))
    Image.new("RGB", (60000, 1), (200, 30, 30)).save(media / "wide.png")
    shutil.copy(VIDEO, media / "clip.mp4")
    rows = [  # EasyR1's problem / answer / images / videos
        {"id": "ok", "problem": "<video>What moves?", "answer": "a car", "videos": ["media/clip.mp4"]},
        {"id": "txt", "problem": "<video>What moves?", "answer": "a car", "videos": ["media/notes.txt"]},
        {"id": "png", "problem": "<video>What moves?", "answer": "a car", "videos": ["media/still.png"]},
        {"id": "wide", "problem": "<image>What colour?", "answer": "red", "images": ["media/wide.png"]},
    ]
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    assert main(["data", "inspect", str(path)]) == 1
    report = capsys.readouterr().out
    at = f"generic data {str(path)!r}: row"
    assert "problems: 3" in report
    assert (
        f"{at} 1 (id 'txt'): field 'videos'[0]: cannot read video '{media / 'notes.txt'}': not a decodable video"
        in report
    )
    assert (
        f"{at} 2 (id 'png'): field 'videos'[0]: cannot read video '{media / 'still.png'}': a still picture "
        "(png_pipe), not a video: give it as an image" in report
    )
    assert (
        f"{at} 3 (id 'wide'): field 'images'[0]: cannot read image '{media / 'wide.png'}': absolute aspect ratio "
        "must be smaller than 200, got 60000.0" in report
    )
    assert "(id 'ok')" not in report
