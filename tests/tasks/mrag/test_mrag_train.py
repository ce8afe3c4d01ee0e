"""End to end through the real CLI on the tiny model: the offline Step-GRPO recipe (unrolled step prompts, each
step's own group, advantages from `step_grpo` on the samples' step_index) and the online recipe (multi-turn
episodes against the knowledge bases), two steps each, on questions generated from a small index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from mrag_helpers import small_default_index

from mmreason import rl
from mmreason.cli import main

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "mrag"


def _train(recipe: str, tiny_model_dir, out: Path, *extra: str) -> list[dict]:
    assert (
        main(
            [
                "train",
                str(CONFIGS / recipe),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "max_steps=2",
                "prompts_per_step=3",
                "data.task_args.train_questions=12",
                "data.task_args.eval_questions=4",
                *extra,
            ]
        )
        == 0
    )
    return [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_offline_step_grpo_recipe_trains_on_unrolled_steps(tiny_model_dir, tmp_path, monkeypatch):
    small_default_index(tmp_path / "cache", monkeypatch)
    rows = _train("mrag_step_grpo_tiny.yaml", tiny_model_dir, tmp_path / "run")
    assert len(rows) == 2 * 3 * 4  # steps x prompts x G
    assert all("#s" in r["sample_id"] for r in rows)  # unrolled step prompts
    steps = torch.tensor([int(r["sample_id"].rsplit("#s", 1)[1]) for r in rows])
    rewards = torch.tensor([[r["rewards"]["route_step/step"], r["rewards"]["route_format"]] for r in rows])
    for step in (1, 2):
        mine = [k for k, r in enumerate(rows) if r["step"] == step]
        want = rl.advantages(
            "step_grpo",
            rewards[mine],
            torch.tensor([rows[k]["group"] for k in mine]),
            weights=torch.tensor([1.0, 0.0]),
            step_index=steps[mine],
        ).advantages
        got = torch.tensor([rows[k]["advantage"] for k in mine])
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all("rewards/route_step/kb_match/mean" in m for m in metrics)  # the KB term is logged


@pytest.mark.slow
def test_online_recipe_rolls_out_episodes_against_the_knowledge_bases(tiny_model_dir, tmp_path, monkeypatch):
    small_default_index(tmp_path / "cache", monkeypatch)
    rows = _train("mrag_online_grpo_tiny.yaml", tiny_model_dir, tmp_path / "run")
    assert len(rows) == 2 * 3 * 4 and all("#s" not in r["sample_id"] for r in rows)  # one prompt per question
    assert any("<observation>" in r["completion"] for r in rows)  # the environment answered turns
    assert all({"mrag_episode/answer", "mrag_episode/routing"} <= set(r["rewards"]) for r in rows)


def test_text_only_step_prompts_sample_a_group_like_the_plain_path(tiny):
    # Most mrag prompts carry no image: the shared-prefill path of G > 1 rollouts must handle the M-RoPE deltas
    # a text-only forward leaves unset, and greedy rows must equal the one-row (no prefill) path.
    from rollout_helpers import sample_tokens

    from mmreason.rollout.generate import GenerationSettings
    from mmreason.rollout.prompts import build_prompt
    from mmreason.types import Sample

    model, processor = tiny
    sample = Sample("t", [{"role": "user", "content": [{"type": "text", "text": "Question: What is 2 plus 3?"}]}])
    prompt = build_prompt(processor, sample, max_prompt_length=512)
    greedy = GenerationSettings(max_new_tokens=8, temperature=0.0)
    group = sample_tokens(
        model, processor.tokenizer, prompt.input_ids, prompt.mm_token_type_ids, prompt.visual, 2, greedy, 0
    )
    (one,) = sample_tokens(
        model, processor.tokenizer, prompt.input_ids, prompt.mm_token_type_ids, prompt.visual, 1, greedy, 0
    ).tolist()
    assert group.tolist() == [one, one]
