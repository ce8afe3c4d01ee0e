"""The vision recipes end to end on the tiny model: every shipped tiny config runs a few steps; the logged
G²RPO advantages equal the RL library's on the logged rewards; VAS state survives a resume; TON logs its
skip-think ratio in training and in eval."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mmreason import rl
from mmreason.cli import main
from mmreason.config import read_yaml
from mmreason.tasks.vision import easyvqa
from mmreason.tasks.vision.rewards import skip_ratio

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs" / "vision"
# the shipped tiny configs mix easy-VQA into the data; without the package the synthetic part runs alone
SOURCE = {} if easyvqa.available() else {"source": "synthetic"}
SYNTHETIC_8 = {"source": "synthetic", "synthetic_n": 8}


def _run(command, config, model, out, *extra, task_args=None):
    """The CLI on a shipped config; ``task_args`` update the config's own (an override replaces the mapping)."""
    args = [
        command,
        str(CONFIGS / config),
        f"model.name_or_path={model}",
        f"output_dir={out}",
        "num_threads=1",
        "rollout.max_completion_length=8",
        *extra,
    ]
    if task_args:
        merged = {**read_yaml(CONFIGS / config)["data"]["task_args"], **task_args}
        args.append("data.task_args=" + json.dumps(merged))
    assert main(args) == 0


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _domain_of(sample_id: str) -> str:
    kind = ("counting", "colour", "chart", "geometry")[int(sample_id.rsplit("-", 1)[1]) % 4]
    return {"counting": "perception", "colour": "perception", "chart": "chart", "geometry": "reasoning"}[kind]


@pytest.mark.slow
def test_g2rpo_advantages_in_the_logs_equal_the_rl_library(tiny_model_dir, shapes_cache, tmp_path):
    # The untrained tiny model fills every completion to the length cap and never answers right, so the
    # recipe's own rewards are constant per domain; a third reward (completion size mod 5) gives G²RPO
    # something to rank.
    (tmp_path / "size_reward.py").write_text(
        "def size_mod5(prompts, completions, **columns):\n    return [float(len(str(c)) % 5) for c in completions]\n"
    )
    rewards = [
        {"name": "mmreason.tasks.vision.scoring:vision_accuracy", "weight": 1.0},
        {"name": "length_trapezoid", "weight": 0.2},
        {"name": str(tmp_path / "size_reward.py") + ":size_mod5", "weight": 0.1},
    ]
    out = tmp_path / "g2rpo"
    # 4 prompts x 4 rollouts = 16 rows: completions.jsonl holds every trajectory of each step
    _run(
        "train",
        "vision_g2rpo_tiny.yaml",
        tiny_model_dir,
        out,
        "max_steps=2",
        "prompts_per_step=4",
        "rollout.num_generations=4",
        "log_completions_steps=1",
        "rewards=" + json.dumps(rewards),
        task_args=SYNTHETIC_8,
    )
    rows = _jsonl(out / "completions.jsonl")
    assert [sum(r["step"] == s for r in rows) for s in (1, 2)] == [16, 16]
    domains_seen = set()
    for step in (1, 2):
        step_rows = [r for r in rows if r["step"] == step]
        names = list(step_rows[0]["rewards"])
        assert names == ["vision_accuracy", "length_trapezoid", "size_mod5"]
        rewards = torch.tensor([[r["rewards"][n] for n in names] for r in step_rows])  # [N, K]
        ids = [r["sample_id"] for r in step_rows]
        group_ids = torch.tensor([sorted(set(ids)).index(i) for i in ids])
        domains = [_domain_of(i) for i in ids]
        domains_seen |= set(domains)
        task_ids = torch.tensor([sorted(set(domains)).index(d) for d in domains])
        expected = rl.advantages(
            "g2rpo", rewards, group_ids, weights=torch.tensor([1.0, 0.2, 0.1]), scope="task_batch", task_ids=task_ids
        ).advantages
        logged = torch.tensor([r["advantage"] for r in step_rows])
        torch.testing.assert_close(logged, expected, atol=1e-6, rtol=0)
        assert logged.abs().max() > 0.1
        # the per-domain sets: within each domain the advantages sum to 0 (G²RPO's symmetric quantiles)
        for d in set(domains):
            assert abs(float(logged[[x == d for x in domains]].sum())) < 1e-5
    assert len(domains_seen) > 1
    metrics = _jsonl(out / "metrics.jsonl")
    per_domain = {k for m in metrics for k in m if k.startswith("reward/") and k.count("/") == 2}
    assert {f"reward/{d}/mean" for d in domains_seen if any(d in k for k in per_domain)} <= per_domain
    assert len(per_domain) >= 2
    # the untrained model's entropy (~6.5 nats) is far above every domain's band: the band term
    # (entropy_coef 0.01 x at least 5.3 nats) shows in the loss on top of the policy loss (and no KL)
    for m in metrics:
        assert m["entropy"] > 5.0 and m["loss"] - m["policy_loss"] > 0.01 * 5.0 * 0.9


@pytest.mark.slow
def test_vision_grpo_tiny_runs_with_length_shaping_per_domain(tiny_model_dir, shapes_cache, tmp_path):
    out = tmp_path / "grpo"
    _run(
        "train",
        "vision_grpo_tiny.yaml",
        tiny_model_dir,
        out,
        "max_steps=2",
        "prompts_per_step=2",
        "rollout.num_generations=2",
        task_args=SOURCE,
    )
    metrics = _jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert all("rewards/length_trapezoid/mean" in m and "rewards/vision_accuracy/mean" in m for m in metrics)
    assert (out / "checkpoint-2" / "model" / "model.safetensors").exists()


@pytest.mark.slow
def test_vas_state_is_checkpointed_and_restored(tiny_model_dir, shapes_cache, tmp_path):
    common = [
        "prompts_per_step=2",
        "rollout.num_generations=2",
        "save_steps=1",
        "save_total_limit=3",
        "max_steps=2",
        "sampler.options=" + json.dumps({"update_every": 1, "mode": "online", "mix": 0.5}),
    ]
    straight = tmp_path / "straight"
    _run("train", "vision_vas_tiny.yaml", tiny_model_dir, straight, *common, task_args=SOURCE)
    first = json.loads((straight / "checkpoint-1" / "trainer_state.json").read_text())["sampler"]
    assert first["scores"] and first["snapshot"] == first["scores"]  # step 1's rollouts scored, weights rebuilt
    assert (first["draws"], first["position"], first["observed"]) == (1, 1, 1)  # 1 weighted + 1 uniform draw
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-1", resumed / "checkpoint-1")
    _run("train", "vision_vas_tiny.yaml", tiny_model_dir, resumed, *common, "resume=auto", task_args=SOURCE)
    a = json.loads((straight / "checkpoint-2" / "trainer_state.json").read_text())["sampler"]
    b = json.loads((resumed / "checkpoint-2" / "trainer_state.json").read_text())["sampler"]
    assert a == b and a["draws"] == 2
    step2 = [[r["sample_id"] for r in _jsonl(d / "completions.jsonl") if r["step"] == 2] for d in (straight, resumed)]
    assert step2[0] == step2[1] and step2[0]


@pytest.mark.slow
def test_ton_sft_then_grpo_logs_the_skip_think_ratio(tiny_model_dir, shapes_cache, tmp_path):
    sft = tmp_path / "sft"
    _run(
        "sft",
        "ton_sft_tiny.yaml",
        tiny_model_dir,
        sft,
        "max_steps=2",
        "prompts_per_step=2",
        "rollout.max_completion_length=48",
        task_args=SOURCE,
    )
    losses = [m["loss"] for m in _jsonl(sft / "metrics.jsonl")]
    assert len(losses) == 2 and all(x == x and x > 0 for x in losses)
    grpo = tmp_path / "grpo"
    _run(
        "train",
        "ton_grpo_tiny.yaml",
        sft / "checkpoint-2" / "model",
        grpo,
        "max_steps=1",
        "prompts_per_step=2",
        "rollout.num_generations=4",
        "log_completions_steps=1",
        task_args=SOURCE,
    )
    (m,) = _jsonl(grpo / "metrics.jsonl")
    rows = _jsonl(grpo / "completions.jsonl")
    assert len(rows) == 8
    assert m["rewards/skip_think/mean"] == pytest.approx(skip_ratio([r["completion"] for r in rows]))
    assert all(r["rewards"]["skip_think"] in (0.0, 1.0) for r in rows)
    # weight 0: the skip-think column is logged but does not move the total reward
    assert [r["reward"] for r in rows] == pytest.approx(
        [r["rewards"]["think_answer_format"] + r["rewards"]["vision_accuracy"] for r in rows]
    )


@pytest.mark.slow
def test_eval_reports_skip_think_and_per_domain_accuracy(tiny_model_dir, shapes_cache, tmp_path):
    from mmreason.tasks.vision.synth import generate

    data = generate(tmp_path / "data", 4, seed=9, size=56)
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--model",
                str(tiny_model_dir),
                "--tasks",
                f"vision:{data}",
                "--output_path",
                str(out),
                "--gen_kwargs",
                "temperature=0,max_new_tokens=8",
                "--device",
                "cpu",
                "--log_samples",
            ]
        )
        == 0
    )
    (results_path,) = out.rglob("*_results.json")
    result = json.loads(results_path.read_text())["results"]["vision:data"]
    (samples_path,) = out.rglob("*_samples_*.jsonl")
    records = _jsonl(samples_path)
    assert result["skip_think,none"] == pytest.approx(skip_ratio([r["response"] for r in records]))
    assert result["accuracy_chart_n,none"] == 1 and result["accuracy_perception_n,none"] == 2
