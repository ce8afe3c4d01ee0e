"""MMLongBench-Doc's published rows (generated here, in its shape) through the DocSeeker loader: read
unchanged, pages retrieved by BM25 and labelled with their real numbers, bad rows named or counted, the
eval harness and GRPO training run on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mmlb_fixtures import published_row, text_pdf, write_benchmark

from mmreason.cli import main
from mmreason.media import pdf_page_count
from mmreason.media.pdf import PDF_STATS, clear_pdf_caches
from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.mmlongbench import BadRow, adapt_row

ROOT = Path(__file__).resolve().parents[3]


def _labels(sample) -> list[str]:
    return [i["text"] for i in sample.messages[0]["content"] if i["type"] == "text" and i["text"].startswith("Page ")]


def test_published_rows_load_unchanged(tmp_path):
    path = write_benchmark(tmp_path / "data")
    samples = docseeker_load(str(path), "eval")
    assert [s.id for s in samples] == ["0:report.pdf", "1:report.pdf", "2:report.pdf", "3:report.pdf", "4:short.pdf"]
    first, listed, unanswerable = samples[0], samples[2], samples[3]
    assert first.meta["evidence_pages"] == [2] and first.meta["answer_format"] == "Int" and first.answer == "12"
    assert first.meta["evidence_sources"] == ["Chart"] and first.meta["doc_type"].startswith("Research report")
    assert first.pages[0].source == str((tmp_path / "data" / "documents" / "report.pdf").resolve())
    assert len(first.pages) == 12 and _labels(first)[:2] == ["Page 1:", "Page 2:"]
    assert listed.meta["evidence_pages"] == [9, 10] and listed.meta["evidence_sources"] == [
        "Pure-text (Plain-text)",
        "Table",
    ]
    assert unanswerable.meta["evidence_pages"] == [-1] and unanswerable.meta["answer_format"] == "None"
    # --task_args doc_dir=...: the documents elsewhere
    moved = tmp_path / "pdfs"
    (tmp_path / "data" / "documents").rename(moved)
    again = docseeker_load(str(path), "eval", doc_dir=str(moved))
    assert len(again) == 5 and again[0].pages[0].source == str((moved / "report.pdf").resolve())


def test_bm25_keeps_top_k_in_document_order_with_real_numbers(tmp_path):
    path = write_benchmark(tmp_path)
    samples = docseeker_load(str(path), "eval", page_retrieval="bm25", retrieval_top_k=3)
    revenue, dividend, listed, _, short = samples
    # "revenue growth quarterly" is on page 2 only; the other two slots go to the earliest pages (score 0)
    assert revenue.meta["retrieved_pages"] == [1, 2, 3] and _labels(revenue) == ["Page 1:", "Page 2:", "Page 3:"]
    assert [p.index for p in revenue.pages] == [0, 1, 2]
    # "dividend payout shareholders" is page 8: kept, shown third, labelled 8, rendered from PDF index 7
    assert dividend.meta["retrieved_pages"] == [1, 2, 8] and _labels(dividend)[-1] == "Page 8:"
    assert [p.index for p in dividend.pages] == [0, 1, 7]
    assert listed.meta["retrieved_pages"][-2:] == [9, 10]  # both gold pages of a cross-page question
    assert "12 pages, of which the 3 most relevant are shown" in dividend.prompt_text
    assert dividend.meta["document_pages"] == 12 and dividend.meta["num_pages"] == 3
    assert short.meta["retrieved_pages"] == [1, 2, 3] and "retrieved_pages" in short.meta  # 3 pages: all kept


def test_pages_without_text_layer_still_take_part(tmp_path):
    scan = text_pdf(tmp_path / "documents" / "scan.pdf", [None] * 6)
    assert pdf_page_count(scan) == 6
    rows = [published_row("scan.pdf", "What is on the figure?", "a bar", "[5]", "Str", "['Figure']")]
    (tmp_path / "samples.json").write_text(json.dumps(rows))
    (sample,) = docseeker_load(str(tmp_path / "samples.json"), "eval", page_retrieval="bm25", retrieval_top_k=2)
    assert sample.meta["retrieved_pages"] == [1, 2]  # nothing to read: the first K by position


def test_each_document_is_opened_and_each_page_rendered_once(tmp_path):
    """Five questions on two documents: each PDF opened once; a page asked twice at one budget renders once."""
    from mmreason.rollout.prompts import load_page

    path = write_benchmark(tmp_path)
    clear_pdf_caches()
    before = dict(PDF_STATS)
    samples = docseeker_load(str(path), "eval", page_retrieval="bm25", retrieval_top_k=3)
    for sample in samples:
        for page in sample.pages:
            load_page(page, None, 64 * 28 * 28)
    opened = PDF_STATS["documents_opened"] - before["documents_opened"]
    rendered = PDF_STATS["pages_rendered"] - before["pages_rendered"]
    distinct = {(p.source, p.index) for s in samples for p in s.pages}
    assert opened == 2
    assert (
        rendered + (PDF_STATS["pages_from_disk"] - before["pages_from_disk"])
        == len(distinct)
        < sum(len(s.pages) for s in samples)
    )


def _bad_benchmark(folder: Path) -> Path:
    docs = folder / "documents"
    text_pdf(docs / "ok.pdf", ["alpha", "beta", "gamma"])
    text_pdf(docs / "locked.pdf", ["secret"], encrypt_filter="Custom")
    (docs / "empty.pdf").write_bytes(b"")
    (docs / "broken.pdf").write_bytes((docs / "ok.pdf").read_bytes()[:60])
    rows = [
        published_row("ok.pdf", "q", "a", "[1]", "Str"),
        published_row("gone.pdf", "q", "a", "[1]", "Str"),
        published_row("locked.pdf", "q", "a", "[1]", "Str"),
        published_row("empty.pdf", "q", "a", "[1]", "Str"),
        published_row("broken.pdf", "q", "a", "[1]", "Str"),
        published_row("ok.pdf", "q", "a", "[7]", "Str"),
        published_row("ok.pdf", "q", "a", "[0]", "Str"),
        published_row("ok.pdf", "q", "a", "2", "Str"),
        published_row("ok.pdf", "q", "a", "[1]", "Bool"),
        published_row("ok.pdf", "q", "a", "[2, 3]", "Str"),
    ]
    (folder / "samples.json").write_text(json.dumps(rows))
    return folder / "samples.json"


# rows 5 and 6 (evidence page 7 of 3, evidence page 0: published so in MMLongBench-Doc) are kept and scored on
# their answers, out of the evidence metrics only (tests/tasks/docseeker/test_mmlongbench_hostile.py)
EXPECTED = {
    1: r"row 1: cannot read PDF '.*gone\.pdf': file does not exist",
    2: r"row 2: cannot read PDF '.*locked\.pdf': the PDF is encrypted",
    3: r"row 3: cannot read PDF '.*empty\.pdf': file is empty",
    4: r"row 4: cannot read PDF '.*broken\.pdf': not a readable PDF",
    7: r"row 7 \(doc_id 'ok\.pdf'\): evidence_pages '2' is not a list",
    8: r"row 8 \(doc_id 'ok\.pdf'\): unknown answer_format 'Bool'",
}


def test_bad_input_is_named_outside_a_run_and_counted_inside(tmp_path, capsys):
    path = _bad_benchmark(tmp_path)
    rows = json.loads(path.read_text())
    for index, pattern in EXPECTED.items():  # one bad row alone: an error naming the file and the row
        (tmp_path / "one.json").write_text(json.dumps([rows[index]]))
        with pytest.raises(
            ValueError,
            match=str(tmp_path / "one.json")
            + ": "
            + pattern.replace("row " + str(index), "row 0").replace(f"'{index}:ok", "'0:ok"),
        ):
            docseeker_load(str(tmp_path / "one.json"), "eval", doc_dir=str(tmp_path / "documents"), bad_rows="error")
    samples = docseeker_load(str(path), "eval", max_bad_fraction=0.9)  # inside a run: skipped, counted
    assert [s.id for s in samples] == ["0:ok.pdf", "5:ok.pdf", "6:ok.pdf", "9:ok.pdf"]
    assert samples.skipped == {
        "missing PDF": 1,
        "unreadable PDF": 3,
        "evidence_pages not a list": 1,
        "unknown answer_format": 1,
    }
    for message, (index, pattern) in zip(samples.errors, EXPECTED.items()):
        assert str(path) in message
        assert __import__("re").search(pattern, message), (index, message)
    with pytest.raises(ValueError, match=r"6 of 10 rows cannot be used .*max_bad_fraction=0.5"):
        docseeker_load(str(path), "eval")  # more bad rows than the limit: the run stops
    assert main(["data", "docseeker", "check", "--data", str(path)]) == 1
    out = capsys.readouterr().out
    assert "row 2: cannot read PDF" in out and "4 rows usable, 6 not" in out
    with pytest.raises(BadRow, match="no 'answer_format' column"):
        adapt_row({"doc_id": "x.pdf", "question": "q", "answer": "a", "evidence_pages": "[1]"}, 3, "f.json", None)


def test_eval_on_published_rows_prints_the_breakdown(tiny_model_dir, tmp_path, capsys):
    path = write_benchmark(tmp_path / "bench")
    rows = json.loads(path.read_text()) + [published_row("missing.pdf", "q", "a", "[1]", "Str")]
    path.write_text(json.dumps(rows))
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--model",
                str(tiny_model_dir),
                "--tasks",
                f"mmlongbench_doc:{path}",
                "--output_path",
                str(out),
                "--task_args",
                "page_retrieval=bm25,retrieval_top_k=3,egra_high_tokens=16,egra_low_tokens=8",
                "--gen_kwargs",
                "max_new_tokens=8",
                "--log_samples",
            ]
        )
        == 0
    )
    results = json.loads(next(out.rglob("*_results.json")).read_text())
    res = results["results"]["mmlongbench_doc:samples"]
    assert res["n"] == 5 and res["n_failed"] == 0
    for metric in (
        "accuracy",
        "f1",
        "accuracy_format_list",
        "accuracy_source_layout",
        "accuracy_cross_page",
        "accuracy_len_le20",
        "evidence_f1",
    ):
        assert f"{metric},none" in res, metric
    assert res["retrieval_recall,none"] == pytest.approx(1.0)  # every gold page was among the top 3
    assert res["accuracy_format_int_n,none"] == 1 and res["accuracy_unanswerable_n,none"] == 1
    config = results["configs"]["mmlongbench_doc:samples"]
    assert config["skipped_rows"] == {"missing PDF": 1} and "not extracted from free text by an LLM" in config["note"]
    assert results["resources"]["peak_rss_mb"] > 0 and results["resources"]["pdf_documents_opened"] >= 0
    table = next(out.rglob("*_results.md")).read_text()
    assert "by rule" in table and "1 data rows skipped (missing PDF: 1)" in table and "| f1 |" in table


@pytest.mark.slow
def test_grpo_trains_on_published_rows(tiny_model_dir, tmp_path):
    path = write_benchmark(tmp_path / "bench")
    out = tmp_path / "grpo"
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "docseeker" / "docseeker_grpo_tiny.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                f"data.train_path={path}",
                "max_steps=2",
                "rollout.num_generations=2",
                "rollout.max_completion_length=8",
                "num_threads=1",
                "save_steps=0",
                "data.task_args={egra_high_tokens: 16, egra_low_tokens: 8, egra_k: 1}",
            ]
        )
        == 0
    )
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
