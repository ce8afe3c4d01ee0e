"""MedScope end to end on the tiny model: SFT on tool trajectories replayed through the environment, GA-GRPO
whose logged advantages equal ``mmreason.rl.advantages("ga_grpo", ...)`` on the logged rewards and fidelities,
and ``mmreason eval`` running each doc as an episode in the same environment."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from medscope_helpers import make_data  # noqa: I001

from mmreason import rl
from mmreason.cli import main
from mmreason.config import load_config
from mmreason.tasks.medscope import REWARDS
from mmreason.train.config import TrainConfig

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs" / "medscope"
# One 60 s video, its temporal-grounding question only: a few SFT steps make the tiny model write real calls.
ONE = "data.task_args={videos: 1, n: 1, seconds: [60, 60], size: 32}"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("name", ["medscope_sft", "medscope_sft_tiny", "medscope_ga_grpo", "medscope_ga_grpo_tiny"])
def test_recipes_load(name):
    cfg = load_config(TrainConfig, CONFIGS / f"{name}.yaml")
    assert cfg.data.task == "medscope" and cfg.rollout.max_turns > 1
    if "grpo" in name:
        assert cfg.algorithm.estimator == "ga_grpo"
        plain = load_config(TrainConfig, CONFIGS / f"{name}.yaml", ["algorithm.estimator=grpo"])
        assert plain.algorithm.estimator == "grpo"  # plain GRPO on the same pack: one line


def _checkpoint(run: Path, step: int) -> Path:
    return run / f"checkpoint-{step}" / "model"


def _sft(tiny_model_dir, out: Path, steps: int) -> Path:
    assert (
        main(
            [
                "sft",
                str(CONFIGS / "medscope_sft_tiny.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                ONE,
                f"max_steps={steps}",
                "learning_rate=1.0e-2",
                "prompts_per_step=2",
                "mini_batch_size=2",
                "save_steps=0",
            ]
        )
        == 0
    )
    return out


@pytest.fixture(scope="module")
def sft_model(tiny_model_dir, shapes_cache, tmp_path_factory):
    """Trained until it writes the trajectory (its greedy episode runs both tools)."""
    return _sft(tiny_model_dir, tmp_path_factory.mktemp("medscope_sft"), 100)


@pytest.fixture(scope="module")
def half_trained(tiny_model_dir, shapes_cache, tmp_path_factory):
    """Half as long: its sampled rollouts still differ in reward."""
    return _sft(tiny_model_dir, tmp_path_factory.mktemp("medscope_sft_half"), 50)


def test_sft_imitates_the_trajectory_with_real_observations(sft_model):
    metrics = [m for m in _jsonl(sft_model / "metrics.jsonl") if "loss" in m]
    assert all(m["count/bad_samples"] == 0 for m in metrics)  # the environment accepted every written turn
    assert metrics[-1]["loss"] < 0.5 * metrics[0]["loss"]


@pytest.mark.slow
def test_an_eval_episode_is_the_sft_replay_of_its_own_turns(sft_model, tmp_path, one_torch_thread):
    """What SFT trains on and what a rollout or eval episode feeds the model are the same tokens: the episode's
    prompt, turns and observations, replayed as an SFT target, give its ids, masks and visual inputs exactly."""
    from rollout_helpers import run_episode

    from mmreason.rollout.chat_turns import turn_end
    from mmreason.rollout.generate import GenerationSettings
    from mmreason.rollout.replay import replay_episode
    from mmreason.train.prompts import load_prompt
    from mmreason.train.setup import setup_run

    model = _checkpoint(sft_model, 100)
    cfg = load_config(
        TrainConfig, CONFIGS / "medscope_sft_tiny.yaml", [f"model.name_or_path={model}", f"output_dir={tmp_path}", ONE]
    )
    run = setup_run(cfg, with_rewards=False)
    run.step = 0
    prompt = load_prompt(run, 0, split="sft")
    env = run.pack.make_environment()
    settings = GenerationSettings(cfg.rollout.max_completion_length, 0.0, 1.0, 0, stop_strings=env.stop_strings)
    episode = run_episode(run.model, run.processor, prompt, env, 0, settings, 3, 4096, 0, 0, 0)
    turns = [t.text for t in episode.turns if t.role == "assistant"]
    assert len(turns) == 3 and [i.get("name") for i in episode.tool_calls[:2]] == ["crop_video", "get_frame"]
    replayed = replay_episode(
        run.processor, prompt, run.pack.make_environment(), "".join(turns), turn_end(run.processor).strip()
    )
    end = episode.token_ids.numel()  # the replay adds the turn end the episode's last turn stopped before
    assert replayed.token_ids.numel() in (end, end + 1)
    assert torch.equal(replayed.token_ids[:end], episode.token_ids)
    assert torch.equal(replayed.action_mask[:end], episode.action_mask)
    assert torch.equal(replayed.mm_token_type_ids[:end], episode.mm_token_type_ids)
    assert len(replayed.visual) == len(episode.visual) == 3  # the global view, the crop, the frames
    for mine, theirs in zip(replayed.visual, episode.visual):
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)


@pytest.mark.slow
def test_ga_grpo_advantages_equal_the_estimator_on_logged_rewards_and_fidelities(
    half_trained, tmp_path, one_torch_thread
):
    model = _checkpoint(half_trained, 50)
    out = tmp_path / "ga"
    assert (
        main(
            [
                "train",
                str(CONFIGS / "medscope_ga_grpo_tiny.yaml"),
                f"model.name_or_path={model}",
                f"output_dir={out}",
                ONE,
                "max_steps=1",
                "prompts_per_step=2",
                "rollout.num_generations=8",
                "rollout.temperature=0.3",
                "mini_batch_size=16",
            ]
        )
        == 0
    )
    rows = _jsonl(out / "completions.jsonl")
    assert len(rows) == 16
    weights = {}
    for spec in REWARDS:
        w = spec["weight"]
        name = spec["name"].rsplit(":", 1)[-1]
        weights.update({f"{name}/{k}": v for k, v in w.items()} if isinstance(w, dict) else {name: w})
    columns = list(rows[0]["rewards"])
    assert set(columns) == set(weights)
    rewards = torch.tensor(
        [[math.nan if r["rewards"][c] is None else r["rewards"][c] for c in columns] for r in rows]
    ).nan_to_num(0.0)  # reward_missing: zero
    fidelity = torch.tensor([r["rewards"]["tool_grounding/fidelity"] for r in rows])
    groups = torch.tensor([r["group"] for r in rows])
    w = torch.tensor([weights[c] for c in columns])
    want = rl.advantages("ga_grpo", rewards, groups, weights=w, fidelity=fidelity, a=0.5, clip=(0.5, 2.0))
    got = torch.tensor([r["advantage"] for r in rows])
    torch.testing.assert_close(got, want.advantages, atol=1e-5, rtol=0)
    # The weighting moves advantages exactly when a group's rollouts differ in fidelity and in reward (it is
    # group-relative). Whether this model's rollouts do depends on its training; the trainer's own fidelity
    # path is checked on varied columns in tests/train/test_estimator_columns.py.
    plain = rl.advantages("grpo", rewards, groups, weights=w).advantages
    group_mean = torch.stack([fidelity[groups == g].mean() for g in groups])
    spread = bool(((plain != 0) & ((fidelity - group_mean).abs() > 1e-6)).any())  # a weight other than 1
    assert torch.allclose(got, plain, atol=1e-4) != spread


@pytest.mark.slow
def test_eval_runs_episodes_in_the_environment_and_logs_the_calls(sft_model, tmp_path, one_torch_thread):
    model = _checkpoint(sft_model, 100)
    data = make_data(tmp_path / "rows", videos=1)
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--model",
                str(model),
                "--tasks",
                f"medscope:{data}",
                "--output_path",
                str(out),
                "--gen_kwargs",
                "temperature=0,max_new_tokens=48,max_turns=3",
                "--device",
                "cpu",
                "--log_samples",
                "--model_args",
                "min_pixels=3136,max_pixels=3136",
            ]
        )
        == 0
    )
    (results_path,) = out.rglob("*_results.json")
    result = json.loads(results_path.read_text())["results"]["medscope:data"]
    for metric in ("accuracy", "grounded_accuracy", "miou", "r@0.3", "r@0.5", "r@0.7", "tool_calls", "grounded_calls"):
        assert f"{metric},none" in result
    assert result["accuracy_n,none"] == 3 and result["miou_n,none"] == 2  # qa has no span
    (samples_path,) = out.rglob("*_samples_*.jsonl")
    records = _jsonl(samples_path)
    turns = [t for r in records for t in r["episode"]["turns"]]
    assert result["tool_calls,none"] > 0 and any("environment" in t for t in turns)
    for t in turns:
        env = t.get("environment", {})
        if "timestamps" in env:  # what a call returned: timestamps, never pixels
            assert env["name"] in ("crop_video", "get_frame") and all(isinstance(s, float) for s in env["timestamps"])
            assert "frames at t =" in t["observation"]
