"""The knobs verl / EasyR1 users reach for: several optimizer steps per rollout batch, and a learning rate
per module (vision tower, projector, language model)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mmreason.config import load_config
from mmreason.train.config import TrainConfig
from mmreason.train.prompts import build_prompts
from mmreason.train.records import task_index, task_names
from mmreason.train.setup import setup_run
from mmreason.train.step import compute_advantages, roll_out, sample_prompts, score
from mmreason.train.table import StepTable, build_table
from mmreason.train.update import policy_update, split_groups

ROOT = Path(__file__).resolve().parents[2]


def _cfg(tiny_model_dir, out, *extra) -> TrainConfig:
    return load_config(
        TrainConfig,
        ROOT / "configs" / "quickstart.yaml",
        [
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={out}",
            "rollout.num_generations=4",
            "rollout.max_completion_length=5",
            "prompts_per_step=2",
            "num_threads=1",
            "learning_rate=3e-3",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
            *extra,
        ],
    )


def test_each_module_gets_its_learning_rate(tiny_model_dir, shapes_cache, tmp_path):
    run = setup_run(
        _cfg(
            tiny_model_dir, tmp_path, "learning_rate=1e-4", "vision_learning_rate=1e-6", "projector_learning_rate=1e-5"
        ),
        verbose=False,
    )
    groups = {g["name"]: g for g in run.optimizer.param_groups}
    assert {n: g["lr"] for n, g in groups.items()} == {"vision": 1e-6, "projector": 1e-5, "language": 1e-4}
    names = {id(p): n for n, p in run.model.named_parameters()}
    for group, where in (
        ("projector", lambda n: ".visual.merger." in f".{n}"),
        ("vision", lambda n: ".visual." in f".{n}" and ".merger." not in n),
        ("language", lambda n: ".visual." not in f".{n}"),
    ):
        assert groups[group]["params"] and all(where(names[id(p)]) for p in groups[group]["params"]), group
    assert sum(len(g["params"]) for g in groups.values()) == sum(1 for p in run.model.parameters() if p.requires_grad)
    default = setup_run(_cfg(tiny_model_dir, tmp_path / "d"), verbose=False)
    assert {g["lr"] for g in default.optimizer.param_groups} == {3e-3}  # unset rates follow learning_rate


def test_split_groups_keeps_groups_whole():
    assert split_groups([5, 5, 7, 7, 9, 9], 2) == [[0, 1, 2, 3], [4, 5]]  # 3 groups: 2 + 1
    assert split_groups([1, 1, 2, 2], 2) == [[0, 1], [2, 3]]
    assert split_groups([1, 1], 4) == [[0, 1]]  # fewer shares than asked when there are fewer groups


def _scored(run) -> StepTable:
    prompts = build_prompts(run, sample_prompts(run))
    trajectories = roll_out(run, prompts, 1)
    samples, batch = score(run, prompts, trajectories)
    tasks = task_names(samples, "domain", "shapes")
    total = batch.total()
    table = build_table(
        trajectories, samples, batch, total, {d.slot: d.index for d in prompts}, tasks=tasks, task_ids=task_index(tasks)
    )
    table.advantages, table.keep = compute_advantages(run, table)
    return table


@pytest.mark.slow
def test_two_steps_per_generation_first_step_is_the_first_share_alone(tiny_model_dir, shapes_cache, tmp_path):
    # No clipping: Adam's first step is ~ lr * sign(g) and hides a wrong gradient scale; compare the norms.
    two = setup_run(_cfg(tiny_model_dir, tmp_path / "a", "steps_per_generation=2", "max_grad_norm=1e9"), verbose=False)
    one = setup_run(_cfg(tiny_model_dir, tmp_path / "b", "max_grad_norm=1e9"), verbose=False)
    scored = _scored(two)
    assert scored.advantages.abs().sum() > 0
    first_share = split_groups([t.group_id for t in scored.trajectories], 2)[0]
    after_first: list[dict[str, torch.Tensor]] = []
    inner = getattr(two.optimizer, "optimizer", two.optimizer)  # accelerate wraps the torch optimizer
    hook = inner.register_step_post_hook(
        lambda opt, args, kwargs: after_first.append({n: p.detach().clone() for n, p in two.model.named_parameters()})
    )
    norms: list[float] = []
    pre = inner.register_step_pre_hook(
        lambda opt, args, kwargs: norms.append(
            float(
                torch.linalg.vector_norm(
                    torch.stack([p.grad.norm() for p in two.model.parameters() if p.grad is not None])
                )
            )
        )
    )
    metrics = policy_update(two, scored)
    hook.remove()
    pre.remove()
    assert len(after_first) == 2  # two optimizer steps on one batch
    alone = policy_update(one, scored.take(first_share))
    assert norms[0] == pytest.approx(alone["grad_norm"], rel=1e-5)  # the share's own gradient, at its scale
    for n, p in one.model.named_parameters():
        torch.testing.assert_close(after_first[0][n], p.detach(), atol=1e-7, rtol=0, msg=n)
    # The second step is off-policy: its ratios are to the policy that sampled, not to the updated one.
    assert metrics["ratio_mean"] != 1.0
