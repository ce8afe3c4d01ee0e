"""The marks documents' "local" ALR trace (``trace: local``): one line per page with its banner, its box and
whether the banner is the asked colour, then the page and box of the one line marked yes. The documents,
questions and answers are those of the default ``list`` trace; only the SFT text differs, and it scores
full marks on the pack's rewards (format, page F1, ANLS) through the same parser."""

from __future__ import annotations

import json

import pytest
from docseeker_helpers import pack_runner, traj

from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.synth import generate, mark_trace


def test_worked_example_marks_the_one_page_whose_banner_is_asked():
    # asked "red"; banners blue, red, green -> page 2 is the only "yes", its box (yellow) is the answer
    got = mark_trace("local", "red", ["blue", "red", "green"], ["green", "yellow", "purple"])
    assert got["localization"].splitlines() == [
        "Page 1: blue, green. red? no.",
        "Page 2: red, yellow. red? yes.",
        "Page 3: green, purple. red? no.",
    ]
    assert got["reasoning"] == "Evidence: page 2. Answer: yellow."
    assert mark_trace("list", "red", ["blue", "red"], ["green", "yellow"]) == {
        "localization": "Page 1: blue. Page 2: red. The red banner is on page 2.",
        "reasoning": "The box on page 2 is yellow.",
    }


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = {}
    for trace in ("list", "local"):
        out[trace] = generate(
            tmp_path_factory.mktemp(trace), 8, 1, 5, seed=3, page_size=(112, 140), style="marks", trace=trace
        )
    return out


def test_local_trace_reads_every_page_and_keeps_the_documents(folders):
    rows = {t: [json.loads(line) for line in p.read_text().splitlines()] for t, p in folders.items()}
    keep = ("question", "answer", "evidence_pages", "banners", "boxes", "analysis")
    assert [{k: r[k] for k in keep} for r in rows["list"]] == [{k: r[k] for k in keep} for r in rows["local"]]
    assert [(folders["list"].parent / r["document"]).read_bytes() for r in rows["list"]] == [
        (folders["local"].parent / r["document"]).read_bytes() for r in rows["local"]
    ]
    for row in rows["local"]:
        lines = row["localization"].splitlines()
        asked = row["question"].split("with the ")[1].split(" banner")[0]
        assert len(lines) == row["num_pages"]
        for k, (line, banner, box) in enumerate(zip(lines, row["banners"], row["boxes"]), start=1):
            assert line == f"Page {k}: {banner}, {box}. {asked}? {'yes' if k in row['evidence_pages'] else 'no'}."
        assert row["reasoning"] == f"Evidence: page {row['evidence_pages'][0]}. Answer: {row['answer']}."


def test_local_trace_target_scores_full_marks_on_the_pack_rewards(folders, tmp_path, monkeypatch):
    from mmreason.tasks.docseeker.alr import docseeker_sft_target

    samples = docseeker_load(str(folders["local"]), "train")
    runner = pack_runner()
    batch = runner(samples, [traj(docseeker_sft_target(s), s.id) for s in samples])
    assert batch.names == ["docseeker_format", "page_fbeta", "anls"]
    assert batch.values.tolist() == [[1.0, 1.0, 1.0]] * len(samples)
    # the loader's task arg picks the trace and keeps it apart in the cache
    monkeypatch.setenv("MMREASON_CACHE", str(tmp_path))
    local = docseeker_load(None, "train", n=2, style="marks", trace="local", pages="2..3", use_egra=False)
    assert list(tmp_path.rglob("marks-local-train-2-2-3-0-112/data.jsonl"))
    assert all("? yes." in docseeker_sft_target(s) for s in local)
    with pytest.raises(ValueError, match="trace must be one of list, local"):
        docseeker_load(None, "train", n=2, style="marks", trace="diagonal")
    with pytest.raises(ValueError, match="only with style marks"):
        generate(tmp_path / "report", 1, 3, 3, style="report", trace="local")
