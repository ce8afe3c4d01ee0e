"""A real PDF nobody here wrote (Debian's R manuals: `apt-get install r-doc-pdf`, which `.ci/run` installs),
rendered under EGRA budgets into a prompt for the tiny model, answered, and scored; then asked through page
retrieval. Skipped when no such manual is installed."""

from __future__ import annotations

import json
import math

import pytest
from docseeker_helpers import completion, installed_pdfs, pack_runner

from mmreason.tasks.docseeker.realdocs import outline_rows

PDFS = installed_pdfs()


@pytest.mark.skipif(not PDFS, reason="no real manual installed (apt-get install r-doc-pdf)")
def test_real_manual_renders_and_scores(tiny, tmp_path):
    from mmreason.media import pdf_page_count, pixels_for_tokens
    from mmreason.rollout.generate import GenerationSettings, generate_group
    from mmreason.rollout.prompts import build_prompt
    from mmreason.taskpack import TASKS
    from mmreason.tasks.docseeker.data import docseeker_load

    model, processor = tiny
    pdf = PDFS[0]
    rows = outline_rows(pdf, n=1, seed=0)
    assert rows, f"{pdf}: no outline entry was found on its page"
    file = tmp_path / "real.jsonl"
    file.write_text(json.dumps(rows[0]) + "\n")
    # The default eval allocation is uniform: every page the same budget, whichever page is gold.
    (sample,) = docseeker_load(str(file), "eval", egra_high_tokens=16, egra_low_tokens=8)
    assert len(sample.pages) == pdf_page_count(pdf) > 10
    gold = sample.meta["evidence_pages"][0]
    assert {p.max_pixels for p in sample.pages} == {pixels_for_tokens(16)}
    prompt = build_prompt(processor, sample, max_prompt_length=8192)
    tokens = (prompt.visual["image_grid_thw"].prod(-1) // 4).tolist()
    assert len(tokens) == len(sample.pages) and 0 < max(tokens) <= 16
    assert tokens[gold - 1] == max(tokens)  # the gold page is not singled out (same page size, same budget)
    # The paper's validation (egra_eval=gold): the gold page alone at the high budget, sharper than the rest.
    (gold_sample,) = docseeker_load(str(file), "eval", egra_high_tokens=16, egra_low_tokens=8, egra_eval="gold")
    assert gold_sample.pages[gold - 1].max_pixels == pixels_for_tokens(16)
    gold_tokens = (
        build_prompt(processor, gold_sample, max_prompt_length=8192).visual["image_grid_thw"].prod(-1) // 4
    ).tolist()
    assert gold_tokens[gold - 1] > max(t for i, t in enumerate(gold_tokens) if i != gold - 1)
    trajectories = generate_group(model, processor, prompt, 0, 2, settings=GenerationSettings(max_new_tokens=8), seed=0)
    runner = pack_runner()
    totals = runner([sample], trajectories).total("renormalize").tolist()
    assert len(totals) == 2 and all(0.0 <= t <= 1.0 and math.isfinite(t) for t in totals)
    perfect = trajectories[0]
    perfect.completion_text = completion([gold], str(sample.answer))
    assert float(runner([sample], [perfect]).total("renormalize")[0]) == pytest.approx(1.0)
    assert TASKS.get("docseeker").metrics["evidence_f1"](sample, perfect.completion_text) == 1.0


@pytest.mark.skipif(not PDFS, reason="no real manual installed (apt-get install r-doc-pdf)")
def test_real_manuals_through_page_retrieval(tmp_path):
    """Outline questions ("on which page does section X begin?") on every installed manual, 8 pages kept by
    BM25 over the text layer: shown in document order under their real numbers, and the retriever finds
    most gold pages (12 questions on the three R manuals: 10 found with r-doc-pdf 4.2.2)."""
    from mmreason.tasks.docseeker.data import docseeker_load

    file = tmp_path / "real.jsonl"
    file.write_text("".join(json.dumps(row) + "\n" for pdf in PDFS for row in outline_rows(pdf, n=4, seed=0)))
    samples = docseeker_load(
        str(file), "eval", page_retrieval="bm25", retrieval_top_k=8, egra_high_tokens=16, egra_low_tokens=8
    )
    found = []
    for sample in samples:
        kept = sample.meta["retrieved_pages"]
        assert len(kept) == 8 and kept == sorted(kept) and sample.meta["document_pages"] > 8
        assert [p.index + 1 for p in sample.pages] == kept
        labels = [i["text"] for i in sample.messages[0]["content"] if i["type"] == "text"][:-1]
        assert labels == [f"Page {k}:" for k in kept]
        found.append(sample.meta["evidence_pages"][0] in kept)
    assert len(found) >= 4 and sum(found) >= 0.5 * len(found), found
