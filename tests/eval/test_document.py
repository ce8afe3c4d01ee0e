"""A document task end to end: PDF pages rendered through the real PDF path, one registered pack.

The pack is defined here and registered for this test only; the real document pack (DocSeeker) gets
its own golden prompt once it ships.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from mmreason.taskpack import TASKS, TaskPack
from mmreason.types import PageRef, Sample

NAME = "docpages-test"


def write_pdf(path: Path, texts: list[str]) -> Path:
    pages = []
    for text in texts:
        page = Image.new("RGB", (300, 400), "white")
        ImageDraw.Draw(page).text((20, 30), text, fill="black")
        pages.append(page)
    pages[0].save(path, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    return path


def make_pack(folder: Path) -> TaskPack:
    def docpages_load(path, split, **_options) -> list[Sample]:
        samples = []
        for d in range(4):
            pdf = write_pdf(
                folder / f"doc{d}.pdf", [f"Doc {d} page {p}: the total is {d * 10 + p}" for p in range(d % 2 + 2)]
            )
            if d == 2:
                pdf = folder / "vanished.pdf"  # a document that is gone: the doc fails, the run goes on
            n_pages = d % 2 + 2
            content = [{"type": "image"}] * n_pages + [{"type": "text", "text": "What is the total on the last page?"}]
            samples.append(
                Sample(
                    id=f"doc-{d}",
                    messages=[{"role": "user", "content": content}],
                    answer=str(d * 10 + n_pages - 1),
                    pages=[PageRef(str(pdf), p) for p in range(n_pages)],
                    task=NAME,
                )
            )
        return samples

    def docpages_metric_contains(sample: Sample, completion: str) -> float:
        """1 if the answer string occurs in the completion."""
        return float(str(sample.answer) in completion)

    def docpages_metric_length(sample: Sample, completion: str) -> float:
        """Completion length in characters (a graded score, so the aggregate is not trivially 0)."""
        return float(len(completion))

    return TaskPack(
        name=NAME,
        description="test-only: questions over rendered PDF pages",
        load=docpages_load,
        metrics={"contains": docpages_metric_contains, "length": docpages_metric_length},
        prompt_template="What is the total on the last page?",
    )


@pytest.fixture
def docpages(tmp_path):
    pack = make_pack(tmp_path)
    TASKS.add(NAME, pack)
    yield pack
    del TASKS._items[NAME]  # registered for this test only


def test_document_task_end_to_end(run_eval, docpages, tiny_model_dir, tmp_path):
    out = run_eval(
        "--model",
        str(tiny_model_dir),
        "--tasks",
        NAME,
        "--batch_size",
        "2",
        "--output_path",
        str(tmp_path / "out"),
        "--log_samples",
        "--gen_kwargs",
        "max_new_tokens=10",
        "--model_args",
        "max_pixels=50176",
    )
    res = out.results["results"][NAME]
    assert (res["n"], res["n_failed"], res["failed_ids"]) == (3, 1, ["doc-2"])
    rows = [json.loads(line) for line in out.samples_paths[NAME].read_text().splitlines()]
    assert [r["doc_id"] for r in rows] == ["doc-0", "doc-1", "doc-2", "doc-3"]
    assert "vanished.pdf" in rows[2]["error"]
    scored = [r for r in rows if "scores" in r]
    # Every page of a doc became an image in its prompt: 2 or 3 pages, each with visual tokens.
    for r in scored:
        pages = 2 + int(r["doc_id"][-1]) % 2
        assert r["prompt"].count("<|image_pad|>") == pages
        assert r["visual_tokens"] >= 4 * pages
    lengths = [r["scores"]["length"] for r in scored]
    assert lengths == [float(len(r["response"])) for r in scored]
    assert res["length,none"] == statistics.fmean(lengths)
    assert res["length_stderr,none"] == pytest.approx(statistics.stdev(lengths) / 3**0.5, abs=1e-12)
    assert out.results["config"]["image_pixels"]["max"] == 50176
