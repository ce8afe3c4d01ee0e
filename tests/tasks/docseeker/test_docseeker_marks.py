"""The "marks" documents of the learning check: the evidence page is the one whose banner has the colour the
question names, its box has the answer's colour, and both survive the 20-token page budget."""

from __future__ import annotations

import json

import pytest

from mmreason.media import pixels_for_tokens, render_pages
from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.synth import MARK_COLOURS, generate


def _nearest(rgb: tuple[float, ...]) -> str:
    return min(MARK_COLOURS, key=lambda c: sum((a - b) ** 2 for a, b in zip(MARK_COLOURS[c], rgb)))


def _mean(image, box: tuple[int, int, int, int]) -> tuple[float, ...]:
    import numpy as np

    return tuple(np.asarray(image.crop(box), dtype=float).reshape(-1, 3).mean(0))


@pytest.fixture(scope="module")
def marks(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("marks"), 6, 3, 5, seed=1, page_size=(112, 140), style="marks")


def test_the_question_names_the_evidence_page_by_its_banner(marks):
    rows = [json.loads(line) for line in marks.read_text().splitlines()]
    assert {len(r["evidence_pages"]) for r in rows} == {1}
    for row in rows:
        pages = render_pages(str(marks.parent / row["document"]), max_pixels=pixels_for_tokens(20))
        assert len(pages) == row["num_pages"] and all(p.size == (112, 140) for p in pages)
        banners = [_nearest(_mean(p, (0, 0, 112, 56))) for p in pages]  # patch rows 0-1
        boxes = [_nearest(_mean(p, (28, 84, 84, 140))) for p in pages]  # patch rows 3-4, columns 1-2
        assert len(set(banners)) == len(banners) and len(set(boxes)) == len(boxes)
        asked = row["question"].split("with the ")[1].split(" banner")[0]
        assert banners.index(asked) + 1 == row["evidence_pages"][0]
        assert boxes[banners.index(asked)] == row["answer"]
        assert all(b != x for b, x in zip(banners, boxes))


def test_loader_generates_marks_at_twenty_tokens_a_page(tmp_path, monkeypatch, tiny_model_dir):
    from mmreason.models import load_processor
    from mmreason.rollout.prompts import build_prompt

    monkeypatch.setenv("MMREASON_CACHE", str(tmp_path))
    samples = docseeker_load(
        None, "eval", n=2, style="marks", pages="3..4", use_egra=False, egra_high_tokens=20, egra_low_tokens=20
    )
    assert all(s.meta["qtype"] == "mark" for s in samples)
    assert list(tmp_path.rglob("marks-eval-2-3-4-10000-112/data.jsonl"))
    processor = load_processor(tiny_model_dir, max_pixels=pixels_for_tokens(20))
    prompt = build_prompt(processor, samples[0], max_prompt_length=1024)
    assert (prompt.visual["image_grid_thw"].prod(-1) // 4).tolist() == [20] * len(samples[0].pages)
    with pytest.raises(ValueError, match="at most 5 pages"):
        generate(tmp_path / "too-many", 1, 6, 6, style="marks")


def test_position_baseline_cites_the_most_frequent_training_page(tmp_path, marks):
    from collections import Counter

    from mmreason.cli import main
    from mmreason.eval.baseline import score_baseline
    from mmreason.eval.paired import paired
    from mmreason.tasks.docseeker.baseline import position_baseline

    samples = docseeker_load(str(marks), "train")
    rows = [json.loads(line) for line in marks.read_text().splitlines()]
    pages = Counter(p for r in rows for p in r["evidence_pages"] if p > 0)
    answers = Counter(r["answer"] for r in rows)
    page = min(pages, key=lambda p: (-pages[p], p))  # ties: the smaller page, the alphabetically first answer
    answer = min(answers, key=lambda a: (-answers[a], a))
    assert position_baseline(samples) == (page, answer)
    summary, records = score_baseline("docseeker", str(marks), str(marks))
    assert summary["evidence_f1"] == sum(r["evidence_pages"] == [page] for r in rows) / len(rows)
    assert summary["accuracy"] == sum(r["answer"] == answer for r in rows) / len(rows)
    assert len(records) == len(rows) and all(f"Page {page}." in r["response"] for r in records)
    out = tmp_path / "baseline.jsonl"
    assert (
        main(
            [
                "eval",
                "baseline",
                "--task",
                "docseeker",
                "--train",
                str(marks),
                "--data",
                str(marks),
                "--samples",
                str(out),
            ]
        )
        == 0
    )
    assert [json.loads(line)["scores"] for line in out.read_text().splitlines()] == [r["scores"] for r in records]
    # paired: B right where A was wrong on two docs, wrong where A was right on one
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(
        "".join(json.dumps({"doc_id": str(i), "scores": {"accuracy": s}}) + "\n" for i, s in enumerate([0, 0, 1, 1, 0]))
    )
    b.write_text(
        "".join(json.dumps({"doc_id": str(i), "scores": {"accuracy": s}}) + "\n" for i, s in enumerate([1, 1, 0, 1, 0]))
    )
    got = paired(a, b, "accuracy", threshold=1.0)
    assert (got["n"], got["up"], got["down"]) == (5, 2, 1)
    assert got["diff"] == pytest.approx(0.2) and got["mcnemar_z"] == pytest.approx(1 / 3**0.5)
