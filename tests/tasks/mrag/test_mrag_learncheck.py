"""The mrag learning check: the per-step majority baseline (`mmreason eval baseline --task mrag`) and the paired
routing counts of two samples files (`mmreason eval paired --metric routing_accuracy`)."""

from __future__ import annotations

import json

import pytest

from mmreason.cli import main
from mmreason.eval.baseline import score_baseline
from mmreason.tasks.mrag.baseline import position_rule
from mmreason.tasks.mrag.data import mrag_load

TABLE = "<think>x</think><sub-question>q</sub-question><ret>Table Retriever</ret>"
ANSWER = "<think>x</think><answer>27</answer>"


def _write(path, records):
    path.write_text(
        "".join(
            json.dumps({"doc_id": d, "response": r, "scores": {"routing_accuracy": s}}) + "\n" for d, r, s in records
        )
    )
    return path


def test_paired_counts_steps_that_turn_right_and_wrong(tmp_path, capsys):
    a = _write(
        tmp_path / "a.jsonl",
        [("q1#s0", TABLE, 1.0), ("q1#s1", "<think>cut off", 0.0), ("q2#s0", TABLE, 0.0), ("q3#s0", ANSWER, 1.0)],
    )
    b = _write(
        tmp_path / "b.jsonl",
        [("q1#s0", TABLE, 1.0), ("q1#s1", ANSWER, 1.0), ("q2#s0", ANSWER, 1.0), ("q3#s0", TABLE, 0.0)],
    )
    assert main(["eval", "paired", str(a), str(b), "--metric", "routing_accuracy", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["n"], out["up"], out["down"]) == (4, 2, 1)
    assert out["mcnemar_z"] == pytest.approx(1 / 3**0.5, abs=1e-4)  # printed to 4 places
    assert (out["a"], out["b"]) == (0.5, 0.75)


def _rows(path, routes):
    path.write_text(
        "".join(
            json.dumps(
                {"id": str(i), "question": "q", "answer": "a", "steps": [{"sub_question": "s", "kb": k} for k in kbs]}
            )
            + "\n"
            for i, kbs in enumerate(routes)
        )
    )
    return path


def test_position_baseline_takes_the_train_majority_per_step(tmp_path):
    train = _rows(tmp_path / "train.jsonl", [["Table Retriever", "Text Retriever"]] * 2 + [[]])
    held = _rows(tmp_path / "held.jsonl", [["Table Retriever", "Text Retriever"], []])
    assert position_rule(mrag_load(str(train))) == {0: "Table Retriever", 1: "Text Retriever", 2: "answer"}
    summary, records = score_baseline("mrag", str(train), str(held))
    # held-out steps: Table, Text, answer (all right) and answer at step 1 (wrong): 3 of 4
    assert summary["n"] == len(records) == 4
    assert summary["routing_accuracy"] == 0.75 and summary["routing_accuracy_step1"] == 0.5
