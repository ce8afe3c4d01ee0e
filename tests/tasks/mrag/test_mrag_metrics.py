"""Eval metrics on hand-worked completions (answer EM / F1, routing accuracy per step, retrieval calls,
answered without retrieval) and `mmreason eval --tasks mrag:PATH` on the tiny model."""

from __future__ import annotations

import json
import math

from mmreason.cli import main
from mmreason.taskpack import TASKS
from mmreason.tasks.mrag.data import row_to_samples

ROW = {
    "id": "q",
    "question": "Price of wheat in 1600, and what was Aristotle?",
    "answer": "27; Greek philosopher",
    "steps": [
        {"sub_question": "What was the price of wheat in 1600?", "kb": "Table Retriever", "answer": "27"},
        {"sub_question": "What was Aristotle?", "kb": "Text Retriever", "answer": "Greek philosopher"},
    ],
}
M = TASKS.get("mrag").metrics


def ret(kb):
    return f"<think>x</think><sub-question>q</sub-question><ret>{kb}</ret>"


def score(name, sample, text):
    value = M[name](sample, text)
    return None if math.isnan(value) else value


def test_step_metrics_on_hand_worked_completions():
    s0, s1, final = row_to_samples(ROW, "rows.jsonl", 0)
    assert score("routing_accuracy", s0, ret("Table Retriever")) == 1.0
    assert score("routing_accuracy", s0, ret("Text Retriever")) == 0.0
    assert score("routing_accuracy", final, "<think>x</think><answer>27</answer>") == 1.0  # answering is its route
    assert score("routing_accuracy_step1", s0, ret("Table Retriever")) == 1.0
    assert score("routing_accuracy_step1", s1, ret("Text Retriever")) is None  # step 2's prompt: not step 1
    assert score("routing_accuracy_step2", s1, ret("Text Retriever")) == 1.0
    assert score("answer_em", s0, ret("Table Retriever")) is None  # only final steps answer
    assert score("answer_em", final, "<think>x</think><answer>27; greek philosopher.</answer>") == 1.0
    assert score("answer_f1", final, "<think>x</think><answer>27; Greek</answer>") == 0.8  # P 1, R 2/3
    assert score("retrieval_call_rate", s1, ret("Text Retriever")) == 1.0
    assert score("retrieval_call_rate", s1, ret("None")) == 0.0
    assert score("answered_without_retrieval", s0, "<think>x</think><answer>27</answer>") == 1.0
    assert score("answered_without_retrieval", s1, "<think>x</think><answer>27</answer>") is None


def test_episode_metrics_count_calls_in_the_transcript():
    (episode,) = row_to_samples(ROW, "rows.jsonl", 0, unrolled=False)
    transcript = (
        ret("Table Retriever")
        + "\n<observation>..</observation>\n"
        + ret("Text Retriever")
        + "\n<observation>..</observation>\n<think>x</think><answer>27; Greek philosopher</answer>"
    )
    assert score("retrieval_calls", episode, transcript) == 2.0
    assert score("answer_em", episode, transcript) == 1.0
    assert score("answered_without_retrieval", episode, transcript) == 0.0
    assert score("answered_without_retrieval", episode, "<think>x</think><answer>27</answer>") == 1.0


def test_eval_cli_reports_the_pack_metrics(tiny_model_dir, tmp_path):
    data = tmp_path / "held_out.jsonl"
    data.write_text(
        json.dumps(ROW)
        + "\n"
        + json.dumps({"id": "n", "question": "What is 2 plus 3?", "answer": "5", "steps": []})
        + "\n"
    )
    assert (
        main(
            [
                "eval",
                "--model",
                str(tiny_model_dir),
                "--tasks",
                f"mrag:{data}",
                "--device",
                "cpu",
                "--output_path",
                str(tmp_path / "out"),
                "--gen_kwargs",
                "max_new_tokens=8",
            ]
        )
        == 0
    )
    (results,) = list((tmp_path / "out").rglob("*_results.json"))
    metrics = json.loads(results.read_text())["results"]["mrag:held_out"]
    assert metrics["routing_accuracy_n,none"] == 4 and metrics["answer_em_n,none"] == 2  # 3 + 1 step prompts
    assert metrics["routing_accuracy_step3_n,none"] == 1 and metrics["answered_without_retrieval_n,none"] == 2
