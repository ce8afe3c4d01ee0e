"""The video generator: deterministic, and every answer it writes is what the decoded video shows."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from mmreason.cli import main
from mmreason.media import load_video
from mmreason.tasks.videoqa import synth
from mmreason.tasks.videoqa.data import read_rows, videoqa_load

SIZE = 64


def _colour_of(pixels: np.ndarray) -> str:
    """The palette colour nearest to the mean of ``pixels`` [n, 3]."""
    mean = pixels.astype(float).mean(0)
    return min(synth.COLOURS, key=lambda c: float(np.abs(mean - np.array(synth.COLOURS[c])).sum()))


def _read_scene(frame: np.ndarray) -> tuple[str | None, float | None, bool]:
    """(square colour, square centre column, disc shown) read off one decoded [H, W, 3] frame."""
    background = np.array(synth.BACKGROUND, float)
    far = np.abs(frame.astype(float) - background).sum(-1) > 120  # [H, W] clearly not background
    top, bottom = far[: SIZE // 2], far[SIZE // 2 :]
    square = None, None
    if top.sum() > 20:
        ys, xs = np.nonzero(top)
        square = _colour_of(frame[: SIZE // 2][top]), float(xs.mean())
    return square[0], square[1], bool(bottom.sum() > 20)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("videoqa") / "a"
    return out, synth.generate(out, 6, seed=3, seconds=(3, 6), size=SIZE)


def test_same_arguments_give_the_same_bytes(generated, tmp_path):
    out, jsonl = generated
    again = synth.generate(tmp_path / "b", 6, seed=3, seconds=(3, 6), size=SIZE)
    assert again.read_bytes() == jsonl.read_bytes()
    for i in range(6):
        assert (tmp_path / "b" / f"{i:05d}.mp4").read_bytes() == (out / f"{i:05d}.mp4").read_bytes()
    other = synth.generate(tmp_path / "c", 6, seed=4, seconds=(3, 6), size=SIZE)
    assert other.read_bytes() != jsonl.read_bytes()


def test_every_answer_type_per_video_and_times_on_half_seconds(generated):
    _, jsonl = generated
    rows = read_rows(jsonl)
    assert len(rows) == 24 and [r["answer_type"] for r in rows[:4]] == list(synth.ANSWER_TYPES)
    for row in rows:
        s = row["scenario"]
        assert 3 <= s["seconds"] <= 6 and s["fps"] in synth.FRAME_RATES
        for t in (s["t_in"], s["t_out"], s["t_change"], *s["flash_starts"]):
            assert (2 * t) == int(2 * t)
        # the square is visible for at most half the video: "the whole video" is never a tIoU-0.5 answer
        assert s["t_out"] - s["t_in"] <= s["seconds"] / 2


def test_answers_match_the_decoded_frames(generated):
    out, jsonl = generated
    rows = read_rows(jsonl)
    for v in range(6):
        mcq, numeric, free, span = rows[4 * v : 4 * v + 4]
        s = mcq["scenario"]
        clip = load_video(out / mcq["video"], fps=s["fps"])  # every frame
        assert len(clip.frame_indices) == s["seconds"] * s["fps"]
        scenes = [_read_scene(f.permute(1, 2, 0).numpy()) for f in clip.frames]
        times = clip.timestamps
        visible = [t for t, (colour, _, _) in zip(times, scenes) if colour is not None]
        # span: first visible frame at t_in, last one frame before t_out
        assert json.loads(span["answer"]) == [visible[0], visible[-1] + 1 / s["fps"]]
        colours = [c for c, _, _ in scenes if c is not None]
        assert colours[0] == s["colour_before"] and colours[-1] == s["colour_after"]
        change = next(t for t, (c, _, _) in zip(times, scenes) if c == s["colour_after"])
        assert change == pytest.approx(s["t_change"])
        xs = [x for _, x, _ in scenes if x is not None]
        assert ("right" if xs[-1] > xs[0] else "left") == s["direction"]
        shown = [d for _, _, d in scenes]
        flashes = sum(1 for k, d in enumerate(shown) if d and (k == 0 or not shown[k - 1]))
        assert str(flashes) == numeric["answer"]
        # the mcq and free answers name what the frames show
        letter_of = {o: "ABCD"[k] for k, o in enumerate(mcq["options"])}
        if mcq["question"].startswith("What colour"):
            assert mcq["answer"] == letter_of[colours[-1]] and free["answer"] == colours[0]
        else:
            assert mcq["answer"] == letter_of[s["direction"]] and free["answer"] == colours[-1]


def test_cli_writes_the_videos_and_rows(tmp_path, capsys):
    assert (
        main(["data", "videoqa", "--out", str(tmp_path / "d"), "--videos", "2", "--seconds", "3..4", "--seed", "1"])
        == 0
    )
    assert "wrote 2 videos, 8 questions" in capsys.readouterr().out
    rows = read_rows(tmp_path / "d" / "data.jsonl")
    assert {r["scenario"]["seconds"] for r in rows} <= {3, 4} and len(rows) == 8
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["00000.mp4", "00001.mp4", "data.jsonl"]
    with pytest.raises(SystemExit, match="MIN >= 3|3 <= MIN"):
        main(["data", "videoqa", "--out", str(tmp_path / "e"), "--videos", "1", "--seconds", "1..2"])


def test_default_eval_split_never_holds_a_train_video(shapes_cache):
    train = videoqa_load(None, "train", videos=4, seconds=(3, 4))
    held_out = videoqa_load(None, "eval", videos=4, eval_videos=4, seconds=(3, 4))
    assert len(videoqa_load(None, "eval", videos=4, eval_videos=2, seconds=(3, 4))) == 8  # eval size is its own
    key = lambda s: json.dumps(s.meta["scenario"], sort_keys=True)  # noqa: E731
    assert len(train) == len(held_out) == 16
    assert not {key(s) for s in train} & {key(s) for s in held_out}
    # the held-out split avoids the first AVOID_TRAIN train draws, whatever train size a run uses
    avoid = set(synth.scenarios(2000, 0, (3, 4)))
    rng_free = {key(s) for s in held_out}
    assert all(
        json.dumps({**vars(a), "flash_starts": list(a.flash_starts)}, sort_keys=True) not in rng_free for a in avoid
    )


def test_flash_placement_fits_every_length():
    for seconds in range(3, 9):
        for seed in range(50):
            s = synth.draw_scenario(random.Random(seed), seconds)
            ends = [t + synth.FLASH_SECONDS for t in s.flash_starts]
            assert ends[-1] <= seconds and all(b - a >= 1.5 for a, b in zip(s.flash_starts, s.flash_starts[1:]))
            assert s.t_in < s.t_change < s.t_out <= seconds


def test_basic_style_answers_match_the_decoded_frames(tmp_path):
    jsonl = synth.generate(tmp_path / "basic", 6, seed=2, seconds=(3, 5), size=SIZE, style="basic")
    rows = read_rows(jsonl)
    assert len(rows) == 18 and all(r["answer_type"] == "free" for r in rows)
    for v in range(6):
        start, end, direction = rows[3 * v : 3 * v + 3]
        s = start["scenario"]
        assert s["flash_starts"] == [] and s["t_in"] == 0 and s["t_out"] == s["seconds"]
        clip = load_video(tmp_path / "basic" / start["video"], fps=2.0, max_frames=8)  # what the recipes see
        pixels = [f.permute(1, 2, 0).numpy() for f in clip.frames]
        scenes = [_read_scene(p) for p in pixels]
        assert all(colour is not None for colour, _, _ in scenes)  # always in view
        below = SIZE // 8 + SIZE * s["side"] // 1000 + 2  # under the square's bottom edge: nothing (no disc)
        assert not any((np.abs(p[below:].astype(float) - synth.BACKGROUND).sum(-1) > 120).any() for p in pixels)
        assert scenes[0][0] == start["answer"] and scenes[-1][0] == end["answer"] != start["answer"]
        assert ("right" if scenes[-1][1] > scenes[0][1] else "left") == direction["answer"]


def test_basic_style_answers_are_balanced():
    drawn = synth.scenarios(400, 0, (3, 5), style="basic")
    for values, pick in (
        (synth.COLOURS, lambda s: s.colour_before),
        (synth.COLOURS, lambda s: s.colour_after),
        (("left", "right"), lambda s: s.direction),
    ):
        counts = [sum(pick(s) == v for s in drawn) for v in values]
        assert min(counts) > 0.7 * 400 / len(values)  # no answer is a majority: a blind prior stays at chance
    with pytest.raises(ValueError, match="style"):
        synth.scenarios(2, 0, (3, 5), style="nope")
