"""`mmreason eval paired`: doc-by-doc counts, McNemar's z and the bootstrap interval, on hand-made samples files."""

from __future__ import annotations

import json
import math

import pytest

from mmreason.cli import main
from mmreason.eval.paired import bootstrap_interval, mcnemar, paired, samples_file


def _samples(path, scores: dict[str, dict]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(json.dumps({"doc_id": k, "scores": v}) + "\n" for k, v in scores.items())
        + json.dumps({"doc_id": "failed", "error": "media unreadable"})
        + "\n"
    )
    return str(path)


A = [0.4, 0.9, 1.0, 0.5]
B = [1.0, 0.95, 0.3, 0.6]


def test_any_change_counts_without_a_threshold_and_only_crossings_with_one():
    assert mcnemar(A, B) == (3, 1, pytest.approx(2 / math.sqrt(4)))  # 0.4->1, 0.9->0.95, 0.5->0.6 up; 1->0.3 down
    assert mcnemar(A, B, threshold=1.0) == (1, 1, 0.0)  # only 0.4 -> 1 and 1 -> 0.3 cross 1
    assert mcnemar([1, 1], [1, 1]) == (0, 0, 0.0)


def test_the_bootstrap_interval_of_a_constant_difference_is_that_difference():
    assert bootstrap_interval([0.25] * 10) == [0.25, 0.25]
    lo, hi = bootstrap_interval([0.0, 1.0] * 20)
    assert lo < 0.5 < hi


def test_paired_leaves_out_docs_without_a_number_in_both(tmp_path):
    a = _samples(
        tmp_path / "a.jsonl",
        {
            "d1": {"acc": 0.0, "miou": math.nan},
            "d2": {"acc": 1.0, "miou": 0.2},
            "d3": {"acc": 0.0, "miou": None},
            "d4": {"acc": 0.0},
            "only_a": {"acc": 1},
        },
    )
    b = _samples(
        tmp_path / "b.jsonl",
        {
            "d1": {"acc": 1.0, "miou": 0.5},
            "d2": {"acc": 0.0, "miou": 0.4},
            "d3": {"acc": 1.0, "miou": 0.9},
            "d4": {"acc": 0.0},
        },
    )
    got = paired(a, b, "acc")
    assert (got["n"], got["up"], got["down"]) == (4, 2, 1)
    assert (got["a"], got["b"], got["diff"]) == (0.25, 0.5, 0.25)
    assert got["mcnemar_z"] == pytest.approx(1 / math.sqrt(3))
    miou = paired(a, b, "miou")  # d1 NaN and d3 None in A: only d2 is paired
    assert (miou["n"], miou["up"], miou["down"]) == (1, 1, 0)
    with pytest.raises(ValueError, match="'tool_calls'"):
        paired(a, b, "tool_calls")


def test_the_cli_compares_folders_by_their_newest_samples_file(tmp_path, capsys):
    old = _samples(tmp_path / "runA/m/20260101_000000_samples_t.jsonl", {"d1": {"acc": 1.0}, "d2": {"acc": 1.0}})
    new_a = _samples(tmp_path / "runA/m/20260202_000000_samples_t.jsonl", {"d1": {"acc": 0.0}, "d2": {"acc": 0.0}})
    _samples(tmp_path / "runB/m/20260101_000000_samples_t.jsonl", {"d1": {"acc": 1.0}, "d2": {"acc": 0.0}})
    assert str(samples_file(tmp_path / "runA")) == new_a != old
    assert main(["eval", "paired", str(tmp_path / "runA"), str(tmp_path / "runB"), "--json"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line) | {"ci95": None} == {
        "metric": "acc",
        "n": 2,
        "a": 0.0,
        "b": 0.5,
        "diff": 0.5,
        "ci95": None,
        "up": 1,
        "down": 0,
        "mcnemar_z": 1.0,
    }
    assert main(["eval", "paired", str(tmp_path / "runA"), str(tmp_path / "runB")]) == 0
    table = capsys.readouterr().out
    assert "20260202_000000_samples_t.jsonl" in table and "acc" in table
    (tmp_path / "empty").mkdir()
    assert main(["eval", "paired", str(tmp_path / "runA"), str(tmp_path / "empty")]) != 0
    assert "no *_samples_*.jsonl under" in capsys.readouterr().err


def test_a_broken_line_of_a_samples_file_is_dropped_with_a_warning_naming_the_file(tmp_path, caplog):
    # (issue 38: a line a kill cut short is dropped with one warning; it used to stop the comparison)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"doc_id": "d1", "scores": {"acc": 1}}) + "\n{not json\n")
    assert paired(bad, bad, "acc")["n"] == 1
    assert any("bad.jsonl" in r.getMessage() and "line (2)" in r.getMessage() for r in caplog.records)
