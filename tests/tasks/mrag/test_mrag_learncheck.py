"""Learning-check figures on hand-made eval samples: paired routing counts and the position baseline."""

from __future__ import annotations

import json

import pytest

from mmreason.cli import main
from mmreason.tasks.mrag.learncheck import paired, position_baseline

TABLE = "<think>x</think><sub-question>q</sub-question><ret>Table Retriever</ret>"
ANSWER = "<think>x</think><answer>27</answer>"


def _write(path, records):
    path.write_text("".join(json.dumps({"doc_id": d, "response": r, "scores": {"routing_accuracy": s}}) + "\n"
                            for d, r, s in records))
    return path


def test_paired_counts_steps_that_turn_right_and_wrong(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [("q1#s0", TABLE, 1.0), ("q1#s1", "<think>cut off", 0.0),
                                      ("q2#s0", TABLE, 0.0), ("q3#s0", ANSWER, 1.0)])
    b = _write(tmp_path / "b.jsonl", [("q1#s0", TABLE, 1.0), ("q1#s1", ANSWER, 1.0),
                                      ("q2#s0", ANSWER, 1.0), ("q3#s0", TABLE, 0.0)])
    out = paired(a, b)
    assert (out["n"], out["up"], out["down"]) == (4, 2, 1)
    assert out["mcnemar_z"] == pytest.approx(1 / 3 ** 0.5)
    assert out["a"]["all"]["routing"] == 0.5 and out["b"]["all"]["routing"] == 0.75
    assert out["a"]["step2"] == {"n": 1, "routing": 0.0, "parsed": 0.0, "routing_if_parsed": pytest.approx(float("nan"), nan_ok=True)}
    assert out["a"]["all"]["parsed"] == 0.75 and out["a"]["all"]["routing_if_parsed"] == pytest.approx(2 / 3)
    assert main(["data", "mrag", "paired", str(a), str(b)]) == 0
    assert json.loads(capsys.readouterr().out)["up"] == 2


def test_position_baseline_takes_the_train_majority_per_step(tmp_path):
    def row(i, kbs):
        return {"id": str(i), "question": "q", "answer": "a", "steps": [{"sub_question": "s", "kb": k} for k in kbs]}

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row(i, kbs)) + "\n" for i, kbs in
                             enumerate([["Table Retriever", "Text Retriever"]] * 2 + [[]])))
    held = tmp_path / "held.jsonl"
    held.write_text("".join(json.dumps(row(i, kbs)) + "\n" for i, kbs in
                            enumerate([["Table Retriever", "Text Retriever"], []])))
    out = position_baseline(train, held)
    assert out["rule"] == {"step1": "Table Retriever", "step2": "Text Retriever", "step3": "answer"}
    # held-out steps: Table, Text, answer (all right) and answer at step 1 (wrong): 3 of 4
    assert out["n"] == 4 and out["routing"] == 0.75 and out["routing_step1"] == 0.5
