"""`mmreason eval compare`: deltas against the first results file, and a PNG chart."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from mmreason.eval import cli
from mmreason.eval.compare import compare_rows, load_results


def _results(name: str, date: str, acc: float, acc_se: float, f1: float | None) -> dict:
    return {
        "model_name": name,
        "date": date,
        "results": {
            "docvqa": {
                "alias": "docvqa",
                "anls,none": acc,
                "anls_stderr,none": acc_se,
                "anls_n,none": 50,
                "f1,none": f1,
                "f1_stderr,none": None,
                "f1_n,none": 1,
                "n": 50,
                "n_failed": 0,
            }
        },
        "higher_is_better": {"docvqa": {"anls": True, "f1": True}},
    }


def test_deltas_against_the_baseline():
    runs = [
        _results("base", "20260101_000000", 0.50, 0.03, 0.2),
        _results("tuned", "20260102_000000", 0.62, 0.04, None),
    ]
    rows = compare_rows(runs)
    assert [(r.task, r.metric) for r in rows] == [("docvqa", "anls"), ("docvqa", "f1")]
    delta, se = rows[0].delta(1)
    assert delta == pytest.approx(0.12) and se == pytest.approx(math.sqrt(0.03**2 + 0.04**2))  # 0.05
    assert rows[1].delta(1) == (None, None)  # missing in the second run


def test_cli_prints_and_writes_a_png(tmp_path, capsys):
    paths = []
    for i, (acc, se) in enumerate([(0.5, 0.03), (0.62, 0.04), (0.4, 0.05)]):
        path = tmp_path / f"r{i}_results.json"
        path.write_text(json.dumps(_results(f"model{i}", "20260101_000000", acc, se, 0.1)))
        paths.append(str(path))
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    png = tmp_path / "charts" / "cmp.png"
    assert cli.run(parser.parse_args(["compare", *paths, "--output", str(png)])) == 0
    out = capsys.readouterr().out
    assert "+0.1200" in out and "-0.1000" in out and str(png) in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_bad_inputs_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        load_results(tmp_path / "nope.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"step": 1}))
    with pytest.raises(ValueError, match="not an `mmreason eval` results file"):
        load_results(other)
