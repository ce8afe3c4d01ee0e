"""Anchors for all-fail groups (docs/methods/within-step.md#anchor): R³ replay of a prompt's past success with its
stored log-probs, DaGRPO's reference answer. The step function runs on hand-made groups with the trainer's real config;
the reference source also trains two quickstart steps from a config."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mmreason.cli import main
from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.prompts import PromptInputs
from mmreason.sampling.anchors import AnchorBuffer, StoredSuccess, all_fail, regenerate
from mmreason.sampling.records import Drawn, Rollouts
from mmreason.sampling.within_step import StepPhases
from mmreason.train.config import TrainConfig
from mmreason.types import Sample, Trajectory

ROOT = Path(__file__).resolve().parents[2]


def test_all_fail_and_the_buffer():
    assert all_fail([0.0, 0.0, float("nan")], 0.0) and not all_fail([0.0, 0.5], 0.0)
    assert not all_fail([float("nan")], 0.0)  # nothing scored: not a failure
    buf = AnchorBuffer(2)
    for k in range(3):
        buf.add(7, StoredSuccess(torch.tensor([k]), f"s{k}"))
    assert len(buf) == 2 and buf.latest(7).text == "s2" and buf.latest(8) is None
    with pytest.raises(ValueError, match="buffer_size"):
        AnchorBuffer(0)


def _group(slot: int, index: int, completions: list[list[int]], logprobs=None):
    sample = Sample(f"q{index}", [{"role": "user", "content": "?"}], answer="a")
    prompt = PromptInputs(sample, torch.tensor([1, 2, 3]), torch.zeros(3, dtype=torch.long))
    trajs = []
    for k, c in enumerate(completions):
        ids = torch.tensor([1, 2, 3, *c])
        mask = torch.tensor([0, 0, 0] + [1] * len(c))
        lp = None if logprobs is None else torch.tensor([0.0, 0.0, 0.0, *logprobs[k]])
        trajs.append(Trajectory(sample.id, slot, ids, mask, 3, " ".join(map(str, c)), rollout_logprobs=lp))
    return Drawn(slot, index, prompt), trajs, [sample] * len(completions)


def test_replay_puts_a_past_success_with_its_log_probs_into_an_all_fail_group():
    """Step 1: prompt 5's group has one success (reward = 1 when the completion holds token 9). Step 2: prompt 5
    all fails: its last rollout becomes the stored success, with the log-probs it was sampled at, and is scored."""
    cfg = TrainConfig()
    cfg.anchor.enabled = True
    run = SimpleNamespace(cfg=cfg, anchor_buffer=None, pack=SimpleNamespace(make_environment=None))

    def score(run, drawn, trajectories):
        values = torch.tensor([[float(9 in t.token_ids[t.prompt_length :].tolist())] for t in trajectories])
        return [d.prompt.sample for d in drawn], RewardBatch(values, ["has9"], torch.ones(1))

    d, trajs, samples = _group(0, 5, [[4, 9], [4, 4]], logprobs=[[-0.5, -1.5], [-0.1, -0.2]])
    _, batch = score(run, [d, d], trajs)
    out = regenerate(StepPhases(run, 1, None, None, score), Rollouts([d], trajs, samples, batch))
    assert out.metrics["anchor/added"] == 0 and len(run.anchor_buffer) == 1
    d2, trajs2, samples2 = _group(3, 5, [[4, 4], [6, 6]], logprobs=[[-0.3, -0.3], [-0.4, -0.4]])
    _, batch2 = score(run, [d2, d2], trajs2)
    out = regenerate(StepPhases(run, 2, None, None, score), Rollouts([d2], trajs2, samples2, batch2))
    new_trajs, new_batch, metrics = out.trajectories, out.batch, out.metrics
    assert metrics["anchor/all_fail_groups"] == 1 and metrics["anchor/added"] == 1
    replayed = new_trajs[1]
    assert replayed.token_ids.tolist() == [1, 2, 3, 4, 9] and replayed.group_id == 3
    assert replayed.rollout_logprobs.tolist() == [0.0, 0.0, 0.0, -0.5, -1.5]  # stored: the trainer's TIS weighs it
    assert new_batch.values[:, 0].tolist() == [0.0, 1.0]
    assert len(run.anchor_buffer) == 1  # an anchor is not stored again


@pytest.mark.slow
def test_reference_anchors_train_two_quickstart_steps(tiny_model_dir, shapes_cache, tmp_path):
    """The tiny model never says the colour: every group fails and gets the reference answer, which scores 1."""
    out = tmp_path / "anchor"
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "max_steps=2",
                "prompts_per_step=2",
                "rollout.num_generations=4",
                "rollout.max_completion_length=4",
                "anchor.enabled=true",
                "anchor.source=reference",
                "log_completions_steps=1",
                "save_steps=0",
                "eval_steps=0",
                "num_threads=1",
            ]
        )
        == 0
    )
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert all(m["anchor/added"] == m["anchor/all_fail_groups"] for m in metrics)
    anchors = [r for r in rows if r["completion"].strip() == r["answer"]]
    assert len(anchors) == sum(m["anchor/added"] for m in metrics) > 0
    assert all(r["reward"] == 1.0 and r["advantage"] > 0 for r in anchors)
    assert any(m["grad_norm"] > 0 for m in metrics)


@pytest.mark.slow
def test_reflection_rolls_an_all_fail_group_out_again_with_a_failure_in_its_prompt(
    tiny_model_dir, shapes_cache, tmp_path
):
    out = tmp_path / "reflect"
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "max_steps=2",
                "prompts_per_step=2",
                "rollout.num_generations=4",
                "rollout.max_completion_length=4",
                "anchor.enabled=true",
                "anchor.source=reflect",
                "log_completions_steps=1",
                "save_steps=0",
                "eval_steps=0",
                "num_threads=1",
            ]
        )
        == 0
    )
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert all(m["anchor/reflected"] == m["anchor/all_fail_groups"] == 2 for m in metrics)  # the model never answers
    assert len(rows) == 16 and all("A previous attempt at this question was wrong:" in r["prompt"] for r in rows)
