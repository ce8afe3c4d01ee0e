"""The pack's reward, 0.1 format + 0.3 page F2 + 0.6 ANLS with the "no specific page" rule, end to end:
rows -> loader -> Sample.meta -> RewardRunner -> RewardBatch.total(renormalize). docs/methods/packs.md#docseeker."""

from __future__ import annotations

import json

import pytest
from docseeker_helpers import completion, pack_runner, traj

from mmreason.cli import main
from mmreason.tasks.docseeker.data import docseeker_load


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """Three rows on one generated 6-page PDF: gold {3,4,5} (1-based), gold [2] given 0-based, and [-1]."""
    from mmreason.tasks.docseeker.synth import generate

    folder = tmp_path_factory.mktemp("reward")
    generate(folder, 1, 6, 6, seed=1, page_size=(170, 220))
    rows = [
        {"id": "three", "document": "doc-00000.pdf", "question": "q", "answer": "Cedar", "evidence_pages": [3, 4, 5]},
        {
            "id": "zero-based",
            "document": "doc-00000.pdf",
            "question": "q",
            "answer": "Cedar",
            "evidence_pages": [2],
            "evidence_base": 0,
        },
        {"id": "nopage", "document": "doc-00000.pdf", "question": "q", "answer": "6", "evidence_pages": [-1]},
    ]
    path = folder / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {s.id: s for s in docseeker_load(str(path), "train")}


def _total(sample, text):
    batch = pack_runner()([sample], [traj(text, sample.id)])
    return batch, float(batch.total("renormalize")[0])


def test_perfect_completion_scores_one(samples):
    batch, total = _total(samples["three"], completion([3, 4, 5], "Cedar"))
    assert batch.names == ["docseeker_format", "page_fbeta", "anls"]
    assert batch.values[0].tolist() == [1.0, 1.0, 1.0]
    assert total == pytest.approx(1.0)


def test_worked_example_page_f2(samples):
    # P = {2, 3}, T = {3, 4, 5}: p = 1/2, q = 1/3, F2 = 5 * (1/6) / (2 + 1/3) = 0.357142...
    batch, total = _total(samples["three"], completion([2, 3], "Cedar"))
    assert float(batch.values[0, 1]) == pytest.approx(0.357142857, abs=1e-6)
    assert total == pytest.approx(0.1 + 0.3 * 0.357142857 + 0.6, abs=1e-6)


def test_missing_reasoning_header_loses_only_the_format_term(samples):
    batch, total = _total(samples["three"], completion([3, 4, 5], "Cedar", reasoning_header=False))
    assert batch.values[0].tolist() == [0.0, 1.0, 1.0]
    assert total == pytest.approx(0.9)


def test_zero_based_rows_are_scored_against_one_based_citations(samples):
    assert samples["zero-based"].meta["evidence_pages"] == [3]
    assert _total(samples["zero-based"], completion([3], "Cedar"))[1] == pytest.approx(1.0)
    assert float(_total(samples["zero-based"], completion([2], "Cedar"))[0].values[0, 1]) == 0.0


def test_no_specific_page_renormalises(samples):
    # gt [-1]: the page term does not apply; total = (0.1 R_fmt + 0.6 R_ans) / 0.7.
    batch, total = _total(samples["nopage"], completion([], "6"))
    assert batch.values[0, 0] == 1.0 and batch.values[0, 2] == 1.0
    assert total == pytest.approx(1.0)
    _, unformatted = _total(samples["nopage"], '<answer>{"evidence_pages": [], "answer": "6"}</answer>')
    assert unformatted == pytest.approx(0.6 / 0.7)


def test_reward_cli_scores_the_pages(capsys):
    text = completion([2, 3], "x")
    assert main(["reward", "page_fbeta", "--completion", text, "--column", "evidence_pages=[3, 4, 5]"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["page_fbeta"] == pytest.approx(0.357142857, abs=1e-6)
