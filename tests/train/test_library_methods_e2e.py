"""Every loss, estimator and sampler of docs/methods/losses.md#on-policy-the-ratio-losses-are-grpo and
docs/algorithms.md#readings-of-abstracts trains two steps of the quickstart from a config
alone: the run finishes, each step's loss is finite, some step has a non-zero gradient, the logged advantages are
those of the named estimator (the config reached it), and each method's own trace is in the run (the off-policy
mask's share, GEPO's kept group entropies, the GDRO sampler's state)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from mmreason import rl
from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")

# (estimator, policy loss, loss options, further overrides); independent options share a run
METHODS = [
    (
        "reinforce_pp_baseline",
        "cispo",
        "{epsilon_max: 2.0}",
        ("algorithm.off_policy_mask_threshold=0.0", "algorithm.num_iterations=2"),
    ),
    ("reinforce_pp", "sapo", "{tau_neg: 2.0}", ()),
    ("grpo", "gmpo", None, ()),
    ("grpo", "kl_cov", "{kl_cov_ratio: 0.1}", ()),
    ("grpo", "clip_cov", "{clip_ratio: 0.1, clip_cov_lb: -10.0}", ()),
    ("grpo", "etr", "{macro_target: weight}", ()),
    ("grpo", "dhpo", "{mixing: entropy}", ()),
    ("grpo", "erpo", None, ()),
    ("grpo", "dagrpo", "{similarity_threshold: 0.3}", ()),
    ("grpo", "r3_rank", "{fail_threshold: 0.1}", ()),
    ("grpo", "vps", "{segmenter: fixed, segment_tokens: 3}", ()),  # 4 tokens: probes at 0, 3, 4 -> 3 per rollout
    ("grpo", "gepo", None, ("sampler.name=gdro",)),
    ("planpo", "conspo", "{margin_warmup_steps: 1}", ()),
    # Rollout-GDRO: groups of different sizes in one step (prompts seen before get n_min = 2 .. n_max = 8)
    (
        "rloo",
        "clipped",
        None,
        (
            "sampler.name=gdro",
            "data.task_args={n: 3}",
            "sampler.options={rollout_allocation: true, n_min: 2, n_max: 8, success_threshold: 0.1}",
        ),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "estimator, loss, loss_options, overrides",
    METHODS,
    ids=[f"{m[0]}+{m[1]}" + ("+gdro" if "sampler.name=gdro" in m[3] else "") for m in METHODS],
)
def test_method_trains_two_quickstart_steps(
    tiny_model_dir, shapes_cache, tmp_path, estimator, loss, loss_options, overrides
):
    out = tmp_path / loss
    extra = [f"algorithm.loss_options={loss_options}"] if loss_options else []
    assert (
        main(
            [
                "train",
                QUICKSTART,
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "max_steps=2",
                "prompts_per_step=2",
                "rollout.num_generations=4",
                "rollout.max_completion_length=4",
                "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
                f"algorithm.estimator={estimator}",
                f"algorithm.policy_loss={loss}",
                *extra,
                *overrides,
                "log_completions_steps=1",
                "save_steps=0",
                "eval_steps=0",
                "num_threads=1",
                "max_grad_norm=1e9",
            ]
        )
        == 0
    )
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(math.isfinite(m["loss"]) for m in metrics)
    assert any(m["grad_norm"] > 0 for m in metrics)
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    for step in (1, 2):
        mine = [r for r in rows if r["step"] == step]
        rewards = torch.tensor([r["rewards"]["anls"] for r in mine])
        groups = torch.tensor([r["group"] for r in mine])
        if estimator == "planpo":  # one turn each; at one common length PlanPO is GRPO exactly
            if not all(r["truncated"] for r in mine):
                continue
            want = rl.advantages("grpo", rewards, groups).advantages
        else:
            want = rl.advantages(estimator, rewards, groups).advantages
        torch.testing.assert_close(torch.tensor([r["advantage"] for r in mine]), want, atol=1e-5, rtol=0)
    sizes = {(r["step"], r["group"]): 0 for r in rows}
    for r in rows:
        sizes[(r["step"], r["group"])] += 1
    if any("rollout_allocation: true" in o for o in overrides):
        assert any(len({n for (s, _), n in sizes.items() if s == step}) > 1 for step in (1, 2)), sizes
    else:
        assert set(sizes.values()) == {4}
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    if "algorithm.off_policy_mask_threshold=0.0" in overrides:
        assert all(0 <= m["off_policy/masked_share"] <= 1 for m in metrics)
    if loss == "vps":  # every rollout is probed at its boundaries: the extra forwards are counted
        for m in metrics:  # 3 probes for a 4-token completion, fewer for one that stopped early
            assert (
                m["vps/probe_forwards"] == 8 * 3
                if m["completion/length_mean"] == 4
                else 8 <= m["vps/probe_forwards"] < 24
            )
    if loss == "gepo":
        assert len(state["entropy_history"]) == 4  # two groups a step, two steps
        assert state["sampler"]["draws"] == 2 and len(state["sampler"]["pass_rate"]) > 0
