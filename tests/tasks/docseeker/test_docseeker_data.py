"""DocSeeker data: the synthetic generator, the loader's row shapes (PDF, page images, DocSeeker's own
files), 1-based page labels in the prompt, ALR SFT targets and the `mmreason data docseeker` command."""

from __future__ import annotations

import json
import math

import pytest

from mmreason.cli import main
from mmreason.media import pdf_page_count
from mmreason.parsing import last_tag_body, parse_dict
from mmreason.taskpack import TASKS
from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.rewards import docseeker_format_score
from mmreason.tasks.docseeker.synth import generate


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("synth")
    return generate(folder, 12, 2, 5, seed=11, page_size=(170, 220))


def test_generator_is_deterministic_and_consistent(generated, tmp_path):
    rows = [json.loads(line) for line in generated.read_text().splitlines()]
    again = generate(tmp_path, 12, 2, 5, seed=11, page_size=(170, 220))
    assert again.read_text() == generated.read_text()
    kinds = set()
    for row in rows:
        pages = pdf_page_count(generated.parent / row["document"])
        assert 2 <= pages <= 5 and pages == row["num_pages"]
        assert row["evidence_pages"] == [-1] or all(1 <= p <= pages for p in row["evidence_pages"])
        if row["qtype"] == "count":
            assert row["evidence_pages"] == [-1] and row["answer"] == str(pages)
        if row["qtype"] == "sum":  # the two budgets named in the localization add up to the answer
            values = [int(v.split(")")[0]) for v in row["localization"].split("(")[1:]]
            assert sum(values) == int(row["answer"]) and len(row["evidence_pages"]) == 2
        kinds.add(row["qtype"])
    assert len(kinds) >= 3


def test_loader_labels_pages_one_based_and_targets_follow_the_alr_format(generated):
    pack = TASKS.get("docseeker")
    for sample in docseeker_load(str(generated), "train"):
        content = sample.messages[0]["content"]
        labels = [c["text"] for c in content if c["type"] == "text" and c["text"].startswith("Page ")]
        assert labels == [f"Page {k}:" for k in range(1, len(sample.pages) + 1)]
        assert sum(c["type"] == "image" for c in content) == len(sample.pages)
        target = pack.target_text(sample)
        assert docseeker_format_score(target) == 1.0
        answer = parse_dict(last_tag_body(target, "answer"))
        assert answer["answer"] == sample.answer
        assert answer["evidence_pages"] == [p for p in sample.meta["evidence_pages"] if p > 0]


def test_page_images_and_docseeker_rows(tmp_path):
    from PIL import Image

    paths = []
    for k in range(3):
        path = tmp_path / f"scan_{k}.png"
        Image.new("RGB", (140, 180), (255, 255 - 60 * k, 255)).save(path)
        paths.append(path.name)
    alr = (
        "<think>\n\\boxed{Question Analysis}\na\n\\boxed{Evidence Localization}\nb\n"
        '\\boxed{Reasoning Process}\nc\n</think>\n<answer>\n{"evidence_pages": [2], "answer": "x"}\n</answer>'
    )
    row = {
        "id": 7,
        "image": paths,
        "gt_page": [1],
        "final_answer": "x",
        "conversations": [{"from": "human", "value": "<image>Which?"}, {"from": "gpt", "value": alr}],
    }
    file = tmp_path / "alr.jsonl"
    file.write_text(json.dumps(row) + "\n")
    (sample,) = docseeker_load(str(file), "train")
    assert sample.meta["evidence_pages"] == [2] and sample.answer == "x" and sample.meta["question"] == "Which?"
    assert [p.source for p in sample.pages] == [str(tmp_path / name) for name in paths]
    assert TASKS.get("docseeker").target_text(sample) == alr
    from mmreason.rollout.prompts import load_page

    second = load_page(sample.pages[1], None, None)  # a page image loads as itself, in page order
    assert second.size == (140, 180) and second.getpixel((70, 90)) == (255, 195, 255)
    budgeted = load_page(sample.pages[1], None, 8 * 28 * 28)  # and at its page budget
    assert budgeted.width * budgeted.height <= 8 * 28 * 28


def test_bad_rows_name_the_row(tmp_path):
    generate(tmp_path, 1, 2, 2, seed=0, page_size=(170, 220))
    file = tmp_path / "bad.jsonl"
    file.write_text(
        json.dumps({"id": "b", "document": "doc-00000.pdf", "question": "q", "answer": "a", "evidence_pages": [9]})
        + "\n"
    )
    with pytest.raises(ValueError, match=r"row \d \(id 'b'\).*evidence page 9"):
        docseeker_load(str(file), "train")


def test_data_command_writes_pdfs_and_jsonl(tmp_path, capsys):
    assert (
        main(["data", "docseeker", "--out", str(tmp_path), "--docs", "2", "--pages", "3..4", "--page-width", "170"])
        == 0
    )
    rows = [json.loads(line) for line in (tmp_path / "data.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(3 <= pdf_page_count(tmp_path / r["document"]) <= 4 for r in rows)
    assert main(["data", "docseeker", "egra-report", "--data", str(tmp_path / "data.jsonl"), "--json"]) == 0
    reports = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["id"] for r in reports] == [r["id"] for r in rows]
    assert all(
        r["tokens_egra_eval"] <= r["tokens_without_egra"] and math.isfinite(r["reduction_train"]) for r in reports
    )


def test_a_long_document_is_capped_before_its_pages_are_rendered(tmp_path, monkeypatch, caplog):
    """Pages per document have a default cap, counted from the PDF header; the cut is logged with the knob."""
    import inspect

    from mmreason.tasks.docseeker import data

    assert inspect.signature(docseeker_load).parameters["max_pages"].default == data.DEFAULT_MAX_PAGES > 0
    generate(tmp_path, 1, 5, 5, seed=0, page_size=(170, 220))
    rendered = []
    monkeypatch.setattr("mmreason.media.pdf._render", lambda *a, **k: rendered.append(a) or None)
    file = tmp_path / "long.jsonl"
    file.write_text(
        json.dumps({"id": "long", "document": "doc-00000.pdf", "question": "q", "answer": "a", "evidence_pages": [2]})
        + "\n"
    )
    with caplog.at_level("WARNING"):
        (sample,) = docseeker_load(str(file), "train", max_pages=3)
    assert len(sample.pages) == 3 and sample.meta["num_pages"] == 3 and sample.meta["document_pages"] == 5
    assert sum(item.get("type") == "image" for item in sample.messages[0]["content"]) == 3
    assert "max_pages=3" in caplog.text and "5 pages" in caplog.text
    assert not rendered  # nothing was rendered to count the pages
    (whole,) = docseeker_load(str(file), "train", max_pages=None)  # the cap can be lifted
    assert len(whole.pages) == 5 and "document_pages" not in whole.meta
    file.write_text(
        json.dumps({"id": "late", "document": "doc-00000.pdf", "question": "q", "answer": "a", "evidence_pages": [5]})
        + "\n"
    )
    with pytest.raises(ValueError, match=r"row 0 \(id 'late'\).*evidence page 5.*max_pages=3"):
        docseeker_load(str(file), "train", max_pages=3)
