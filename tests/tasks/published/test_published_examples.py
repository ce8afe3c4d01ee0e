"""`mmreason data examples` writes each benchmark's published layout at the paths the docs' commands use: the
pack reads it unchanged, every row with the answer its picture or clip shows (read back from the pixels)."""

from __future__ import annotations

import json

import av
import pytest
from examples_readback import colour_shown, other_answer, shapes_shown

from mmreason.cli import main
from mmreason.eval.rescore import rescore
from mmreason.examples import scenes
from mmreason.media.image import load_image
from mmreason.tasks.chartqa.data import chartqa_load
from mmreason.tasks.docvqa.data import docvqa_load
from mmreason.tasks.mathvista.data import mathvista_load
from mmreason.tasks.mmmu.data import mmmu_load
from mmreason.tasks.videomme.data import videomme_load

ROWS = 8
LETTER = {"red": "A", "green": "B", "blue": "C", "yellow": "D"}  # the option order of every colour question


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    root = tmp_path_factory.mktemp("examples")
    layouts = "chartqa,docvqa,mathvista,mmmu,mmmu_pro,videomme"
    assert main(["data", "examples", "--out", str(root), "--layouts", layouts, "--rows", str(ROWS)]) == 0
    return root


def _picture(sample):
    if sample.videos:
        with av.open(sample.videos[0].path) as container:
            return next(container.decode(video=0)).to_image()
    return load_image(sample.images[0])


def test_chartqa_human_rows_ask_the_colour_augmented_ones_the_bars(out):
    drawn = scenes(ROWS)
    samples = chartqa_load(str(out / "ChartQA Dataset" / "test"))
    even, odd = drawn[0::2], drawn[1::2]
    assert [s.id for s in samples] == [f"human_{k}" for k in range(4)] + [f"augmented_{k}" for k in range(4)]
    assert [s.answer for s in samples] == [s.colour for s in even] + [str(s.count + 1) for s in odd]
    for sample, scene in zip(samples, even + odd):
        assert (colour_shown(_picture(sample)), shapes_shown(_picture(sample))) == (scene.colour, scene.count + 1)


def test_docvqa_pages_show_the_banner_colour_asked(out):
    samples = docvqa_load(str(out / "DocVQA" / "val" / "val_v1.0.json"))
    assert len(samples) == ROWS and not samples.skipped
    for sample, scene in zip(samples, scenes(ROWS)):
        assert sample.answer[0] == scene.colour == colour_shown(_picture(sample))


def test_mathvista_multi_choice_colours_and_free_form_counts(out):
    samples = mathvista_load(str(out / "MathVista" / "data" / "testmini.json"))
    assert [s.meta["question_type"] for s in samples] == ["multi_choice", "free_form"] * (ROWS // 2)
    for k, (sample, scene) in enumerate(zip(samples, scenes(ROWS))):
        shown = colour_shown(_picture(sample)) if k % 2 == 0 else str(shapes_shown(_picture(sample)))
        assert sample.answer == shown == (scene.colour if k % 2 == 0 else str(scene.count))


def test_mmmu_subject_folders_letters_and_open_answers(out):
    samples = mmmu_load(str(out / "MMMU"))
    drawn = scenes(ROWS)
    assert [s.meta["subject"] for s in samples] == ["Art"] * 4 + ["Math"] * 4
    assert [s.answer for s in samples] == [LETTER[s.colour] for s in drawn[0::2]] + [str(s.count) for s in drawn[1::2]]
    art = samples[0]
    assert art.meta["options"] == list(LETTER) and LETTER[colour_shown(_picture(art))] == art.answer


def test_mmmu_pro_vision_screenshots_show_the_colour_asked(out):
    samples = mmmu_load(str(out / "MMMU_Pro" / "vision" / "test-00000-of-00001.parquet"))
    assert {(s.meta["setting"], s.meta["benchmark"]) for s in samples} == {("vision", "MMMU-Pro")}
    for sample, scene in zip(samples, scenes(ROWS)):
        assert sample.answer == LETTER[scene.colour] == LETTER[colour_shown(_picture(sample))]


def test_videomme_clips_show_the_colour_asked(out):
    samples = videomme_load(str(out / "Video-MME" / "videomme" / "test-00000-of-00001.parquet"), subtitles=True)
    assert len(samples) == ROWS and "with subtitles: 8 of 8 videos have a .srt" in samples.notes
    for sample, scene in zip(samples, scenes(ROWS)):
        assert sample.answer == LETTER[scene.colour] == LETTER[colour_shown(_picture(sample))]


@pytest.mark.parametrize(
    "spec, load, metric",
    [
        ("chartqa:ChartQA Dataset/test", chartqa_load, "relaxed_accuracy"),
        ("docvqa:DocVQA/val/val_v1.0.json", docvqa_load, "anls"),
        ("mathvista:MathVista/data/testmini.json", mathvista_load, "accuracy"),
        ("mmmu:MMMU", mmmu_load, "accuracy"),
        ("mmmu:MMMU_Pro/vision/test-00000-of-00001.parquet", mmmu_load, "accuracy"),
        ("videomme:Video-MME/videomme/test-00000-of-00001.parquet", videomme_load, "accuracy"),
    ],
)
def test_the_benchmark_scores_the_gold_answers_1_and_others_0(out, tmp_path, spec, load, metric):
    pack, path = spec.split(":", 1)
    samples = load(str(out / path))
    gold = [s.answer[0] if isinstance(s.answer, list) else s.answer for s in samples]
    for name, answers, expected in (("gold", gold, 1.0), ("other", [other_answer(a) for a in gold], 0.0)):
        preds = tmp_path / f"{name}.jsonl"
        preds.write_text(
            "".join(json.dumps({"question_id": s.id, "response": a}) + "\n" for s, a in zip(samples, answers))
        )
        results, _ = rescore(f"{pack}:{out / path}", str(preds), output_path=str(tmp_path / name))
        (task,) = results["results"].values()
        assert task[f"{metric},none"] == expected, (spec, name)
