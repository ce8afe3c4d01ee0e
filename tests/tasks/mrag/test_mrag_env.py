"""The online environment: a step runs its retriever and comes back as an observation (text, images for the
text-image KB); answers and None end the episode, so does the step limit; retrieval is bounded; bad steps
(an invented retriever, a 100 KB sub-question, an empty query, no parse) are error observations."""

from __future__ import annotations

import pytest
import torch
from mrag_helpers import small_default_index, small_index

from mmreason.tasks.mrag.env import MragEnv, mrag_environment
from mmreason.tasks.mrag.kb import KnowledgeBaseError, load_index
from mmreason.tasks.mrag.rewards import mrag_episode
from mmreason.types import Trajectory, Turn


def step(question, kb):
    return f"<think>need it</think><sub-question>{question}</sub-question><ret>{kb}</ret>"


@pytest.fixture
def env(tmp_path):
    e = MragEnv(load_index(small_index(tmp_path)), k=2, token_budget=60, max_steps=4, max_calls=2)
    e.reset(None)
    return e


def test_a_step_runs_its_retriever_and_returns_the_hits(env):
    obs = env.step(step("Who discovered argon?", "Text Retriever"))
    assert not obs.done and obs.text.startswith("Text Retriever results:")
    assert "Lord Rayleigh" in obs.text and obs.info["hits"][0] == "text:Argon:0"
    assert len(obs.info["hits"]) <= 2 and len(obs.text.split()) < 60 + 20  # k and the token budget


def test_text_image_hits_come_back_as_images(env):
    obs = env.step(step("a tabby cat", "Text Image Retriever"))
    assert len(obs.images) == 1 and obs.images[0].width * obs.images[0].height <= 56 * 56
    assert "Chelsea" in obs.text


def test_answer_and_none_end_the_episode(env):
    assert env.step("<think>known</think><answer>42</answer>").done
    env.reset(None)
    obs = env.step(step("None", "None"))
    assert obs.done and "error" not in obs.info


@pytest.mark.parametrize(
    "action, message",
    [
        (step("Who discovered argon?", "Web Search"), "unknown retriever 'Web Search'"),
        (step("Who discovered argon?", "Text Retriever, Table Retriever"), "unknown retriever"),
        (step("x" * (100 * 1024), "Text Retriever"), "over the limit"),
        (step("argon " * 300, "Text Retriever"), "over the limit of 1000"),  # under the step limit, over the query's
        (step("the of ??", "Text Retriever"), "empty query"),
        ("I will just chat", "does not parse"),
    ],
)
def test_bad_steps_are_error_observations(env, action, message):
    obs = env.step(action)
    assert message in obs.info["error"] and obs.text.startswith("Error:") and not obs.done


@pytest.mark.parametrize(
    "action, message",
    [
        (
            "<think>need <ret>Text Retriever</ret></think><sub-question>Who discovered argon?</sub-question>"
            "<ret>Text Retriever</ret>",
            "<ret> is inside <think>; close </think> first",
        ),
        (
            step("Who discovered argon?", "Text Retriever") + step("Who named it?", "Table Retriever"),
            "one step per turn: this turn holds 2 <sub-question> and 2 <ret>",
        ),
        (
            "<think>need it</think><ret>Text Retriever</ret><sub-question>Who discovered argon?</sub-question>",
            "tags out of order (<think>, <ret>, <sub-question>)",
        ),
        ("<think>need it</think><sub-question>Who discovered argon?</sub-question>", "the step has no <ret>"),
        ("<think>x</think><sub-question>q</sub-question><ret>None</ret><answer>4</answer>", "either retrieves"),
        ("<think>need it<sub-question>q</sub-question>", "<sub-question> is inside <think>"),
    ],
)
def test_a_malformed_step_is_told_what_is_malformed_not_an_unknown_retriever(env, action, message):
    """Each of these was told "unknown retriever 'Text Retriever'", a name that exists."""
    error = env.step(action).info["error"]
    assert error.startswith("the step does not parse: ") and message in error and "unknown retriever" not in error


def test_retrieval_is_bounded_per_episode_and_the_step_limit_ends_it(env):
    for _ in range(2):
        assert "error" not in env.step(step("argon", "Text Retriever")).info
    third = env.step(step("argon", "Text Retriever"))
    assert "budget of 2 calls is spent" in third.info["error"] and not third.done
    assert env.step("no step").done  # the 4th step is the limit


def test_the_pack_environment_needs_a_built_index(tmp_path, monkeypatch):
    monkeypatch.setenv("MMREASON_CACHE", str(tmp_path / "empty"))
    with pytest.raises(KnowledgeBaseError, match="mmreason data mrag build"):
        mrag_environment()
    small_default_index(tmp_path / "cache", monkeypatch)
    assert "Text Retriever results" in mrag_environment().step(step("argon", "Text Retriever")).text


def _episode(*turns):
    spans = [Turn("assistant", t, 0, 1) for t in turns]
    return Trajectory("q", 0, torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.long), 0, "", turns=spans)


def test_episode_reward_scores_answer_routing_and_format():
    from mmreason.types import Sample

    sample = Sample(
        "q",
        [],
        answer="27; Greek philosopher",
        meta={"gold_steps": [{"kb": "Table Retriever"}, {"kb": "Text Retriever"}]},
    )
    gold = _episode(
        step("wheat in 1600", "Table Retriever"),
        step("Aristotle", "Text Retriever"),
        "<think>ok</think><answer>27; Greek philosopher</answer>",
    )
    assert mrag_episode([sample], [gold]) == {"answer": [1.0], "routing": [1.0], "format": [1.0]}
    wrong = _episode(step("wheat", "Text Retriever"), "<think>ok</think><answer>27</answer>")
    out = mrag_episode([sample], [wrong])
    assert out["routing"] == [0.0] and out["answer"] == [0.0]  # short gold: every token needed
    assert mrag_episode([sample], [_episode("chat")])["format"] == [0.0]
    no_retrieval = Sample("n", [], answer="101", meta={"gold_steps": []})
    assert mrag_episode([no_retrieval], [_episode("<think>add</think><answer>101</answer>")])["routing"] == [1.0]
    assert mrag_episode([no_retrieval], [_episode("chat", "more chat")])["routing"] == [0.0]  # no free credit


def test_online_runs_stop_before_training_without_an_index(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from pathlib import Path

    from mmreason.cli import main

    monkeypatch.setenv("MMREASON_CACHE", str(tmp_path / "empty"))
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "q", "question": "What is 2 plus 3?", "answer": "5", "steps": []}\n')
    recipe = Path(__file__).resolve().parents[3] / "configs" / "mrag" / "mrag_online_grpo_tiny.yaml"
    assert (
        main(
            [
                "train",
                str(recipe),
                f"model.name_or_path={tiny_model_dir}",
                f"data.train_path={rows}",
                f"output_dir={tmp_path / 'run'}",
                "max_steps=1",
            ]
        )
        == 2
    )
    assert "no mrag knowledge-base index" in capsys.readouterr().err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
