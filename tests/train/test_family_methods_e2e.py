"""Every GRPO-family method of docs/methods/estimators.md and docs/methods/losses.md (DGPO, OPMD, AsymRE,
DisCO, HölderPO, GBPO) trains two steps of the quickstart from a config alone: the
run finishes, each step's loss is finite and some step has a non-zero gradient, and the advantages the trainer logs equal
``mmreason.rl.advantages`` on the logged rewards (so the config reached the registered function)."""

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

# (estimator, its options as a config value, policy loss, loss options, further config overrides)
METHODS = [
    ("dgpo", {"temperature": 1.0}, "clipped", None, ()),
    ("opmd", {"baseline": "logavgexp", "tau": 0.5}, "opmd", {"tau": 1.0}, ()),
    ("asymre", {"shift": -0.1}, "opmd", None, ()),
    ("disco", {"threshold": 0.1}, "disco", {"score": "logL", "tau": 10.0}, ()),
    ("grpo", {}, "gbpo", {"temperature": 0.01}, ()),
    ("grpo", {}, "holder", {"level": "token", "p_schedule": "linear_dec", "schedule_steps": 2}, ()),
    ("grpo", {}, "dcpo", {"entropy_base": 0.5}, ()),  # T' and the tempered forward from the last step's entropy
    ("grpo", {}, "llds", {"llds_coef": 0.1, "gate": "action"}, ("algorithm.num_iterations=2",)),  # 2nd pass off-policy
    ("grpo", {}, "clipped", None, ("refine.enabled=true",)),  # iGRPO: trains on draft-conditioned refinements
    # SAGE: every group counts as failed (threshold 1), so the policy is asked for hints each step
    ("grpo", {}, "clipped", None, ("hint.enabled=true", "hint.threshold=1.0", "hint.max_hint_tokens=4")),
]
IDS = [f"{m[0]}+{m[2]}" + "".join(f"+{o.split('.')[0]}" for o in m[4] if o.endswith("enabled=true")) for m in METHODS]


def _yaml(options: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in options.items()) + "}"


@pytest.mark.slow
@pytest.mark.parametrize("estimator, options, loss, loss_options, overrides", METHODS, ids=IDS)
def test_method_trains_two_quickstart_steps(
    tiny_model_dir, shapes_cache, tmp_path, estimator, options, loss, loss_options, overrides
):
    out = tmp_path / estimator
    extra = [f"algorithm.loss_options={_yaml(loss_options)}"] if loss_options else []
    extra += list(overrides)
    extra += [f"algorithm.estimator_options={_yaml(options)}"] if options else []
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
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    moved = False
    for step in ([r for r in rows if r["step"] == 1], [r for r in rows if r["step"] == 2]):
        assert len(step) == 8
        rewards = torch.tensor([r["rewards"]["anls"] for r in step])
        want = rl.advantages(estimator, rewards, torch.tensor([r["group"] for r in step]), **options).advantages
        torch.testing.assert_close(torch.tensor([r["advantage"] for r in step]), want, atol=1e-5, rtol=0)
        moved |= bool(want.abs().sum() > 0)
        if "refine.enabled=true" in overrides:  # the trained rows are refinements of a prompt holding a draft
            assert all("Here is a previous attempt" in r["prompt"] for r in step)
    if "refine.enabled=true" in overrides:
        assert all(m["refine/kept_drafts"] == 0 and "refine/best_draft_reward_mean" in m for m in metrics)
    if loss == "dcpo":  # no entropy before the first step (0 <= 0.5): T' = 1.2; then the first step's entropy
        assert metrics[0]["update/tempered_temperature"] == 1.2
        assert metrics[1]["update/tempered_temperature"] == (1.2 if metrics[0]["entropy"] <= 0.5 else 0.8)
    if "hint.enabled=true" in overrides:
        assert sum(m["hint/prompts_needing_hint"] for m in metrics) > 0 and "hint/used_level_1" in metrics[0]
    assert moved  # at least one step had a learning signal
    assert any(m["grad_norm"] > 0 for m in metrics)
