"""The learning check: the video-blind baseline rule (`mmreason eval baseline --task medscope`) and the paired
comparison of two samples files (`mmreason eval paired`)."""

from __future__ import annotations

import json
import math

import pytest
from medscope_helpers import make_data  # noqa: I001

from mmreason.cli import main
from mmreason.eval.baseline import score_baseline
from mmreason.eval.paired import paired
from mmreason.tasks.medscope.baseline import blind_rule
from mmreason.tasks.medscope.data import medscope_load


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("medscope-learncheck"), videos=3)


def test_blind_rule_answers_the_train_majority_and_mean_window(rows):
    samples = medscope_load(str(rows))
    rule = blind_rule(samples)
    for s in samples:
        same = [
            o
            for o in samples
            if o.meta["task_type"] == s.meta["task_type"]
            and o.messages[0]["content"][-1]["text"].split("\n")[0]
            == s.messages[0]["content"][-1]["text"].split("\n")[0]
        ]
        answer, (lo, hi) = next(
            v
            for k, v in rule.items()
            if k[0] == s.meta["task_type"] and s.messages[0]["content"][-1]["text"].startswith(k[1])
        )
        assert lo == pytest.approx(sum(o.meta["span"][0][0] for o in same) / len(same))
        assert hi == pytest.approx(sum(o.meta["span"][0][1] for o in same) / len(same))
        counts = [str(o.answer) for o in same]
        assert counts.count(answer) == max(counts.count(c) for c in counts)


def test_blind_baseline_scores_its_own_answers_with_the_pack_metrics(rows):
    summary, records = score_baseline("medscope", str(rows), str(rows))
    assert summary["n"] == len(records) == len(medscope_load(str(rows), "eval"))
    assert summary["tool_calls"] == 0.0 and summary["grounded_calls"] is None  # it calls no tool
    assert all("<answer>" in r["response"] for r in records)
    assert summary["accuracy"] == pytest.approx(sum(r["scores"]["accuracy"] for r in records) / len(records))


def _samples(path, scores):
    path.write_text("".join(json.dumps({"doc_id": k, "scores": v}) + "\n" for k, v in scores.items()))
    return path


def test_paired_counts_turns_and_skips_docs_without_the_metric(tmp_path, capsys):
    a = _samples(
        tmp_path / "a.jsonl",
        {
            "d1": {"accuracy": 0.0, "miou": math.nan},
            "d2": {"accuracy": 1.0},
            "d3": {"accuracy": 0.0},
            "d4": {"accuracy": 0.0},
            "only_a": {"accuracy": 1},
        },
    )
    b = _samples(
        tmp_path / "b.jsonl",
        {
            "d1": {"accuracy": 1.0, "miou": 0.5},
            "d2": {"accuracy": 0.0},
            "d3": {"accuracy": 1.0},
            "d4": {"accuracy": 0.0},
        },
    )
    got = paired(a, b, "accuracy")
    assert (got["n"], got["up"], got["down"]) == (4, 2, 1)
    assert got["mcnemar_z"] == pytest.approx(1 / math.sqrt(3))
    with pytest.raises(ValueError, match="miou"):
        paired(a, b, "miou")  # d1's A score is NaN: no doc has it in both
    assert main(["eval", "paired", str(a), str(b), "--metric", "accuracy", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["up"] == 2
    # without --metric every metric A carries is tried; one no doc has in both is named as skipped, not an error
    assert main(["eval", "paired", str(a), str(b), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [x["metric"] for x in lines] == ["accuracy", "miou"]
    assert lines[0]["up"] == 2 and "skipped" in lines[1]
    # asked for by name, it still fails loudly: a one-line error naming the metric
    assert main(["eval", "paired", str(a), str(b), "--metric", "miou"]) == 2
    assert "miou" in capsys.readouterr().err
