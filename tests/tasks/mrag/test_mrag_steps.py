"""Offline unrolling (Step-GRPO, docs/methods/packs.md#r1-router): a gold trajectory's steps become their own prompts
with growing gold histories; the gold output of each step scores 1 under the pack's reward; two KBs score 0."""

from __future__ import annotations

import json

import pytest
import torch
from mrag_helpers import small_default_index

from mmreason import rl
from mmreason.taskpack import TASKS
from mmreason.tasks.mrag.data import mrag_load
from mmreason.tasks.mrag.rewards import route_step
from mmreason.types import Trajectory

ROW = {
    "id": "q1",
    "question": "Which element is in the first row of the table, and who discovered it?",
    "steps": [
        {"sub_question": "What element is in the first row?", "kb": "Table Retriever", "answer": "argon"},
        {"sub_question": "Who discovered argon?", "kb": "Text Retriever", "answer": "Lord Rayleigh"},
    ],
    "answer": "Lord Rayleigh",
}


def traj(text: str) -> Trajectory:
    return Trajectory("x", 0, torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.long), 0, text)


@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROW) + "\n")
    return path


def test_three_step_trajectory_unrolls_into_three_prompts_with_growing_histories(data_file):
    samples = mrag_load(str(data_file))
    assert [s.meta["step_index"] for s in samples] == [0, 1, 2]
    assert len({s.id for s in samples}) == 3  # distinct ids: each step prompt is its own group
    assert [s.meta["step_type"] for s in samples] == ["ret", "ret", "ans"]
    prompts = [s.prompt_text for s in samples]
    assert "Sub-question1" not in prompts[0]
    assert "Sub-question1: What element is in the first row?\nAnswer1: argon" in prompts[1]
    assert "Sub-question2" not in prompts[1]
    assert "Sub-question2: Who discovered argon?\nAnswer2: Lord Rayleigh" in prompts[2]
    assert all(prompts[k] in prompts[k + 1] or len(prompts[k + 1]) > len(prompts[k]) for k in range(2))
    assert samples[0].meta["knowledge_base"] == "Table Retriever"
    assert samples[1].meta["sub_question"] == "Who discovered argon?"


def test_distinct_groups_under_step_grpo(data_file):
    # Two prompts of the same question at different steps never share a group: each z-scores on its own.
    samples = mrag_load(str(data_file))
    rewards = torch.tensor([[1.0], [0.0], [0.5], [0.5], [1.0], [0.0]])  # [N=6, K=1], G=2 per step prompt
    sample_ids = torch.tensor([0, 0, 0, 0, 0, 0])  # one question
    steps = torch.tensor([s.meta["step_index"] for s in samples for _ in range(2)])
    adv = rl.advantages("step_grpo", rewards, sample_ids, weights=torch.tensor([1.0]), step_index=steps).advantages
    assert adv[2:4].abs().max() == 0  # step 1's group has equal rewards: no signal, whatever steps 0/2 got
    assert adv[0] > 0 > adv[1] and adv[4] > 0 > adv[5]


def test_exact_gold_output_scores_one_on_every_step(data_file):
    samples = mrag_load(str(data_file))
    pack = TASKS.get("mrag")
    out = route_step(samples, [traj(pack.target_text(s)) for s in samples])
    assert out["step"] == [1.0, 1.0, 1.0]
    assert out["kb_match"][:2] == [1.0, 1.0] and out["kb_match"][2] is None  # final step: answer recall only


def test_two_kbs_named_score_zero_on_the_kb_term(data_file):
    first = mrag_load(str(data_file))[0]
    text = (
        "<think>x</think><sub-question>What element is in the first row?</sub-question>"
        "<ret>Table Retriever, Text Retriever</ret>"
    )
    out = route_step([first], [traj(text)])
    assert out["kb_match"] == [0.0] and out["step"] == [0.0]
    wrong_kb = route_step([first], [traj(text.replace("Table Retriever, Text Retriever", "Text Retriever"))])
    assert wrong_kb["kb_match"] == [0.0] and wrong_kb["step"] == [0.5]  # right question, wrong single KB


def test_episode_samples_keep_the_gold_route(data_file, tmp_path, monkeypatch):
    small_default_index(tmp_path / "cache", monkeypatch)  # episodes check the index when they load
    (episode,) = mrag_load(str(data_file), unrolled=False)
    assert episode.id == "q1" and episode.meta["num_steps"] == 2
    assert [s["kb"] for s in episode.meta["gold_steps"]] == ["Table Retriever", "Text Retriever"]


@pytest.mark.parametrize(
    "steps, message",
    [
        ([{"sub_question": "x", "kb": "Web Search"}], "kb 'Web Search'"),
        ([{"kb": "Text Retriever"}], "no sub_question"),
        ("not a list", "not a list"),
    ],
)
def test_bad_rows_are_named(tmp_path, steps, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({**ROW, "steps": steps}) + "\n")
    with pytest.raises(ValueError, match=rf"bad.jsonl: row 0 \(id 'q1'\).*{message}"):
        mrag_load(str(path))
