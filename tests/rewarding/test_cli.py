"""`mmreason reward NAME --completion TEXT --column k=v` and the rows of `mmreason list rewards`."""

from __future__ import annotations

import argparse
import json

import pytest

from mmreason.rewarding import cli


def run(*argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(list(argv)))


def test_prints_scores_as_json(capsys):
    assert run("mcq", "--completion", "The answer is (C).", "--column", "answer=C") == 0
    assert json.loads(capsys.readouterr().out) == {"mcq/accuracy": 1.0, "mcq/unparsed": 0.0}
    completion = '<answer>{"evidence_pages": [2, 3], "answer": "x"}</answer>'
    assert run("page_fbeta", "--completion", completion, "--column", "evidence_pages=[3, 4, 5]") == 0
    assert json.loads(capsys.readouterr().out) == {"page_fbeta": pytest.approx(0.357143)}


def test_kwargs_tokens_and_does_not_apply(capsys):
    assert run("length_trapezoid", "--completion", "x", "--tokens", "300", "--kwarg", "profile=perception") == 0
    assert json.loads(capsys.readouterr().out) == {"length_trapezoid": pytest.approx(724 / 768, abs=1e-6)}
    assert run("anls", "--completion", "<answer>x</answer>") == 0  # no reference: does not apply
    assert json.loads(capsys.readouterr().out) == {"anls": None}


def test_completion_file_and_file_reward(tmp_path, capsys):
    (tmp_path / "out.txt").write_text("<think>\n\n</think><answer>1</answer>")
    assert run("think_answer_format", "--completion-file", str(tmp_path / "out.txt")) == 0
    assert json.loads(capsys.readouterr().out) == {"think_answer_format": 1.0}
    (tmp_path / "r.py").write_text("def wordy(completions, **kw):\n    return [len(c.split()) for c in completions]\n")
    assert run(f"{tmp_path / 'r.py'}:wordy", "--completion", "one two three") == 0
    assert json.loads(capsys.readouterr().out) == {"wordy": 3.0}


def test_errors_are_reported(tmp_path, capsys):
    assert run("anl", "--completion", "x") == 2
    assert "did you mean 'anls'" in capsys.readouterr().err
    (tmp_path / "bad.py").write_text("def broken(samples, trajectories):\n    raise RuntimeError('bad reward')\n")
    assert run(f"{tmp_path / 'bad.py'}:broken", "--completion", "x") == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"broken": None} and "RuntimeError: bad reward" in captured.err


def test_list_rows():
    rows = dict(cli.rows())
    assert rows["page_fbeta"].startswith("DocSeeker page reward")
    assert all(doc for doc in rows.values())
