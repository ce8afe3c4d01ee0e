"""Vision pack data: the row loader, the synthetic generator, easy-VQA conversion, the text-only baseline."""

from __future__ import annotations

import json
import re

import pytest

from mmreason.taskpack import TASKS
from mmreason.tasks.vision import easyvqa
from mmreason.tasks.vision.baseline import Baseline
from mmreason.tasks.vision.data import row_to_sample, vision_load
from mmreason.tasks.vision.synth import generate

needs_easyvqa = pytest.mark.skipif(not easyvqa.available(), reason="easy-vqa is not installed")


def _write(tmp_path, rows):
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_jsonl_rows_become_samples_with_domain_type_and_length_profile(tmp_path):
    rows = [
        {
            "id": "a",
            "image": "img/a.png",
            "question": "How many?",
            "answer": "3",
            "answer_type": "numeric",
            "domain": "chart",
        },
        {
            "id": "b",
            "images": ["/abs/1.png", "/abs/2.png"],
            "question": "Which?",
            "answer": "B",
            "answer_type": "mcq",
            "choices": ["cat", "dog"],
            "domain": "reasoning",
            "extra": 5,
        },
        {"id": "c", "image": "c.png", "question": "Is it red?", "answer": "yes", "answer_type": "yes/no"},
    ]
    a, b, c = vision_load(str(_write(tmp_path, rows)), "train")
    assert a.images == [str(tmp_path / "img" / "a.png")] and a.task == "vision"
    assert a.meta["length_profile"] == "hybrid" and b.meta["length_profile"] == "reasoning"
    assert c.meta["domain"] == "perception" and c.meta["length_profile"] == "perception"  # default domain
    assert [i["type"] for i in b.messages[0]["content"]] == ["image", "image", "text"]
    assert "(A) cat (B) dog" in b.prompt_text and "letter" in b.prompt_text
    assert b.meta["extra"] == 5 and b.answer == "B"


def test_bad_rows_name_the_file_and_row(tmp_path):
    base = {"id": "x1", "image": "a.png", "question": "q?", "answer": "1"}
    with pytest.raises(ValueError, match=r"x1.*answer_type 'number'"):
        row_to_sample({**base, "answer_type": "number"}, "f.jsonl")
    with pytest.raises(ValueError, match=r"f.jsonl: row 'x1' has no 'image'"):
        row_to_sample({k: v for k, v in base.items() if k != "image"}, "f.jsonl")
    with pytest.raises(ValueError, match="option letter"):
        row_to_sample({**base, "answer_type": "mcq", "choices": ["p", "q"], "answer": "C"}, "f.jsonl")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        vision_load(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="thought_dropout needs answer_format: think"):
        vision_load(str(_write(tmp_path, [base])), thought_dropout=0.5)


def test_think_format_targets(tmp_path):
    rows = [
        {"id": "t", "image": "a.png", "question": "q?", "answer": "4", "answer_type": "numeric", "trace": "two and two"}
    ]
    (s,) = vision_load(str(_write(tmp_path, rows)), answer_format="think")
    assert s.meta["target"] == "<think>two and two</think><answer>4</answer>"
    assert TASKS.get("vision").target_text(s) == s.meta["target"]
    assert "<answer>" in s.prompt_text


def test_synthetic_generator_is_deterministic_and_its_answers_follow_the_traces(tmp_path):
    path = generate(tmp_path / "one", 12, seed=4, size=96)
    again = generate(tmp_path / "two", 12, seed=4, size=96)
    assert path.read_text() == again.read_text()
    assert (tmp_path / "one" / "00003.png").read_bytes() == (tmp_path / "two" / "00003.png").read_bytes()
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [r["kind"] for r in rows[:4]] == ["counting", "colour", "chart", "geometry"]
    assert {r["domain"] for r in rows} == {"perception", "chart", "reasoning"}
    for r in rows:
        assert r["answer_type"] == "numeric" and r["answer"].isdigit()
        if r["kind"] == "geometry":  # "spans w cells by h cells, so its area is w x h = A"
            w, h = (int(x) for x in re.search(r"spans (\d+) cells by (\d+) cells", r["trace"]).groups())
            assert int(r["answer"]) == w * h
        else:
            assert r["trace"].rstrip(".").split()[-1] == r["answer"] or f" {r['answer']} " in r["trace"]


def test_synthetic_source_and_domain_filter(shapes_cache):
    samples = vision_load(None, "train", source="synthetic", synthetic_n=8)
    assert len(samples) == 8 and all(s.meta["source"] == "synthetic" for s in samples)
    charts = vision_load(None, "train", source="synthetic", synthetic_n=8, domains=["chart"])
    assert [s.meta["kind"] for s in charts] == ["chart", "chart"]
    held_out = vision_load(None, "eval", source="synthetic", synthetic_n=8)
    assert {s.images[0] for s in held_out}.isdisjoint(s.images[0] for s in samples)


def test_baseline_is_the_majority_answer_per_template():
    def sample(i, template, answer):
        return row_to_sample(
            {
                "id": str(i),
                "image": "/a.png",
                "question": "q",
                "answer": answer,
                "answer_type": "yes/no" if answer in ("yes", "no") else "free-form",
                "template": template,
            },
            "mem",
        )

    train = [
        sample(0, "t1", "no"),
        sample(1, "t1", "no"),
        sample(10, "t1", "no"),
        sample(2, "t1", "yes"),
        sample(3, "t2", "red"),
        sample(4, "t2", "blue"),
        sample(5, "t2", "blue"),
    ]
    base = Baseline.fit(train)
    assert base.answers == {"t1": "no", "t2": "blue"} and base.fallback == "no"
    held_out = [sample(6, "t1", "no"), sample(7, "t1", "yes"), sample(8, "t2", "blue"), sample(9, "t3", "no")]
    assert base.accuracy(held_out) == 3 / 4  # t3 is unseen: the overall majority "no"


@needs_easyvqa
def test_easyvqa_conversion_from_the_installed_package():
    train, test = easyvqa.easyvqa_rows("train"), easyvqa.easyvqa_rows("test")
    assert (len(train), len(test)) == (38575, 9673)  # as the package's README states
    assert {r["answer"] for r in train} == set(easyvqa.COLOURS) | set(easyvqa.SHAPES) | {"yes", "no"}
    first = train[0]
    assert first["question"] == "what is the blue shape?" and first["answer"] == "rectangle"
    assert first["template"] == "what is the {colour} shape?" and first["trace"] == "The image shows a blue rectangle."
    assert {r["image"] for r in train}.isdisjoint(r["image"] for r in test)
    yes_no = sum(r["answer_type"] == "yes/no" for r in train)
    assert yes_no == 28407  # the package README's count of yes/no training questions
    samples = vision_load(None, "eval", source="easyvqa", n=50)
    assert len(samples) == 50 and samples[0].meta["domain"] == "perception"
    assert samples == vision_load(None, "eval", source="easyvqa", n=50)  # the subset is seeded


def test_template_filter_keeps_image_only_questions():
    pytest.importorskip("easy_vqa")
    from mmreason.tasks.vision.data import vision_load

    samples = vision_load(split="train", source="easyvqa", n=400, templates=["what"])
    assert samples and all(s.meta["template"].startswith("what") for s in samples)
    assert all(s.meta["answer_type"] == "free-form" for s in samples)  # colours and shapes, no yes/no


def test_eval_baseline_scores_the_template_majority_with_the_pack_metrics(tmp_path):
    from mmreason.eval.baseline import score_baseline

    train = _rows(tmp_path / "train.jsonl", [("t1", "no"), ("t1", "no"), ("t1", "yes"), ("t2", "yes")])
    held = _rows(tmp_path / "held.jsonl", [("t1", "no"), ("t1", "yes"), ("t2", "yes"), ("t3", "no")])
    summary, records = score_baseline("vision", str(train), str(held))
    # t1 -> "no", t2 -> "yes", unseen t3 -> the overall majority "no": right on 3 of 4
    assert [r["response"] for r in records] == ["no", "no", "yes", "no"]
    assert summary["accuracy"] == 0.75 and summary["n_train"] == 4


def _rows(path, items):
    path.write_text(
        "".join(
            json.dumps(
                {"id": str(i), "image": "/a.png", "question": "q", "answer": a, "answer_type": "yes/no", "template": t}
            )
            + "\n"
            for i, (t, a) in enumerate(items)
        )
    )
    return path
