"""`mmreason data examples` writes every layout the generic pack reads: each file is detected as its format, gives
its rows back with the answers its pictures and clips show (read back from the pixels), scores the gold answer 1
and another 0, and passes `mmreason data inspect`."""

from __future__ import annotations

import av
import pytest
import torch
from examples_readback import colour_shown, other_answer, shapes_shown

from mmreason.cli import main
from mmreason.examples import scenes
from mmreason.media.image import load_image
from mmreason.tasks.generic.data import generic_load
from mmreason.tasks.generic.rewards import generic_accuracy
from mmreason.types import Trajectory

ROWS = 8
FILES = {  # layout -> (file, format)
    "easyr1": ("easyr1.parquet", "easyr1"),
    "trl": ("trl.jsonl", "trl"),
    "verl": ("verl.parquet", "verl"),
    "videor1": ("videor1.json", "videor1"),
    "sharegpt": ("sharegpt.json", "sharegpt"),
    "columns": ("mine.jsonl", "easyr1"),
}
RENAMES = {"columns": {"prompt": "question", "answer": "label", "images": "img"}}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    root = tmp_path_factory.mktemp("examples")
    argv = ["data", "examples", "--out", str(root), "--layouts", ",".join(FILES), "--rows", str(ROWS)]
    assert main(argv) == 0
    return root


def _load(out, layout):
    return generic_load(str(out / FILES[layout][0]), columns=RENAMES.get(layout))


def _expected(layout: str) -> list[str]:
    """By hand from the scenes: even rows ask the colour, odd rows the count; Video-R1's even rows are clips
    asked as options A-D (red, green, blue, yellow); ShareGPT's last gpt turn is the count."""
    drawn = scenes(ROWS)
    if layout == "sharegpt":
        return [str(s.count) for s in drawn]
    if layout == "videor1":
        letters = {"red": "A", "green": "B", "blue": "C", "yellow": "D"}
        return [letters[s.colour] if k % 2 == 0 else str(s.count) for k, s in enumerate(drawn)]
    return [s.colour if k % 2 == 0 else str(s.count) for k, s in enumerate(drawn)]


@pytest.mark.parametrize("layout", list(FILES))
def test_each_layout_is_detected_and_gives_its_rows_back(out, layout, capsys):
    samples = _load(out, layout)
    fmt = FILES[layout][1]
    assert f"format {fmt} (detected)" in capsys.readouterr().out
    assert len(samples) == ROWS and {s.meta["format"] for s in samples} == {fmt}
    assert [s.answer for s in samples] == _expected(layout)


def _first_frame(path: str):
    with av.open(path) as container:
        return next(container.decode(video=0)).to_image()


@pytest.mark.parametrize("layout", list(FILES))
def test_the_pictures_show_the_answers(out, layout):
    drawn = scenes(ROWS)
    for k, sample in enumerate(_load(out, layout)):
        picture = load_image(sample.images[0]) if sample.images else _first_frame(sample.videos[0].path)
        # every row's picture shows its scene: colour and count, whatever the row asks
        assert (colour_shown(picture), shapes_shown(picture)) == (drawn[k].colour, drawn[k].count), (layout, k)


def _traj(text: str) -> Trajectory:
    return Trajectory("", 0, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 0, text)


def test_the_reward_tells_the_gold_answer_from_another(out):
    for layout in ("easyr1", "videor1"):
        for sample in _load(out, layout):
            texts = [f"\\boxed{{{a}}}" for a in (sample.answer, other_answer(sample.answer))]
            got = generic_accuracy([sample, sample], [_traj(t) for t in texts])
            assert got == [1.0, 0.0], (layout, sample.id, sample.answer)


def test_inspect_finds_no_problem_in_any_layout(out, capsys):
    for layout, (name, fmt) in FILES.items():
        columns = ["--columns", "{prompt: question, answer: label, images: img}"] if layout in RENAMES else []
        assert main(["data", "inspect", str(out / name), *columns]) == 0, layout
        report = capsys.readouterr().out
        assert f"format {fmt}" in report and f"{ROWS} rows" in report and "problems: 0" in report, report


def test_an_unknown_layout_is_one_line_naming_the_known_ones(tmp_path, capsys):
    assert main(["data", "examples", "--out", str(tmp_path), "--layouts", "easyr1,easyR2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mmreason data: error: --layouts: no layout 'easyR2'; layouts: ") and "videomme" in err
    assert not list(tmp_path.iterdir())  # nothing written
