"""Token-budget micro-batches (``max_tokens_per_micro_batch``): the cut by hand, every row once within the
budget, as many micro-batches on every process, and the step's gradient equal to row-count batching's for
every ``loss_type``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreason import rl
from mmreason.config import load_config
from mmreason.rl.losses.aggregation import LOSS_TYPES
from mmreason.train.config import TrainConfig
from mmreason.train.prompts import build_prompts
from mmreason.train.records import task_index, task_names
from mmreason.train.setup import setup_run
from mmreason.train.step import compute_advantages, roll_out, sample_prompts, score
from mmreason.train.table import build_table
from mmreason.train.token_budget import budget_minibatches, split_to, token_cost
from mmreason.train.update import plan_shares, policy_update
from mmreason.types import Trajectory

ROOT = Path(__file__).resolve().parents[2]


def _trajs(spec: list[tuple[int, int]], prompt: int = 1) -> list[Trajectory]:
    """(group id, total tokens) per row."""
    return [
        Trajectory(
            sample_id=f"s{g}",
            group_id=g,
            token_ids=torch.zeros(n, dtype=torch.long),
            action_mask=torch.ones(n, dtype=torch.long),
            prompt_length=prompt,
            completion_text="",
        )
        for g, n in spec
    ]


#               group 0: 12 tokens     group 1: 50 tokens      group 2: 27 tokens
SPEC = [(0, 5), (0, 7), (1, 30), (1, 20), (2, 12), (2, 15)]


def test_whole_groups_by_tokens_longest_first():
    trajs = _trajs(SPEC)
    cost = token_cost(trajs)
    rows = list(range(6))
    assert budget_minibatches(rows, trajs, 50, cost) == [[2, 3], [5, 4, 1, 0]]  # 50, then 27 + 12
    # group 1 (50) is over 40: its rows 30 and 20 go alone; 20 + group 2 would be 47
    assert budget_minibatches(rows, trajs, 40, cost) == [[2], [3], [5, 4, 1, 0]]
    # every row over the budget, or two of them over it: each row its own micro-batch
    assert budget_minibatches(rows, trajs, 10, cost) == [[2], [3], [5], [4], [1], [0]]


def test_shared_prompt_counts_once_per_group():
    trajs = _trajs(SPEC, prompt=4)
    assert token_cost(trajs)([2, 3]) == 50
    assert token_cost(trajs, shared_prompt=True)([2, 3]) == 46  # the prompt of group 1 once
    assert token_cost(trajs, shared_prompt=True)([2, 3, 4]) == 58  # and group 2's once
    assert budget_minibatches(list(range(6)), trajs, 46, token_cost(trajs, shared_prompt=True))[0] == [2, 3]


def test_split_to_the_agreed_count_halves_the_heaviest():
    trajs = _trajs(SPEC)
    cost = token_cost(trajs)
    cut = [[2], [3], [5, 4, 1, 0]]
    assert split_to(cut, 3, trajs, cost) == cut
    assert split_to(cut, 4, trajs, cost) == [[2], [3], [5, 4], [1, 0]]  # by groups: 27 | 12
    assert split_to(cut, 5, trajs, cost) == [[2], [3], [5], [4], [1, 0]]  # then group 2 by rows
    assert len(split_to(cut, 9, trajs, cost)) == 6  # no more rows to cut: the stand-ins make up the rest


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(1, 40)), min_size=1, max_size=30),
    st.integers(1, 90),
    st.integers(0, 12),
)
def test_every_row_once_within_budget_deterministic(spec, budget, extra):
    trajs = _trajs(spec)
    cost = token_cost(trajs)
    rows = list(range(len(spec)))
    got = budget_minibatches(rows, trajs, budget, cost)
    assert got == budget_minibatches(rows, trajs, budget, cost)
    more = split_to(got, len(got) + extra, trajs, cost)
    assert len(more) == min(len(got) + extra, len(rows))
    for cut in (got, more):
        assert sorted(i for b in cut for i in b) == rows
        assert all(cost(b) <= budget or len(b) == 1 for b in cut)  # over the budget only a row alone


def _cfg(tiny_model_dir, out) -> TrainConfig:
    return load_config(
        TrainConfig,
        ROOT / "configs" / "quickstart.yaml",
        [
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={out}",
            "rollout.num_generations=4",
            "rollout.max_completion_length=6",
            "prompts_per_step=3",
            "num_threads=1",
            "max_grad_norm=1e9",
            "algorithm.beta=0.04",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",  # varies on the random model's output
        ],
    )


def _gradients(run, table, snapshot) -> dict[str, torch.Tensor]:
    """The gradient the optimizer step sees, from the parameters in ``snapshot``."""
    run.model.load_state_dict(snapshot)
    seen: dict[str, torch.Tensor] = {}
    inner = getattr(run.optimizer, "optimizer", run.optimizer)
    hook = inner.register_step_pre_hook(
        lambda *_: seen.update({n: p.grad.clone() for n, p in run.model.named_parameters() if p.grad is not None})
    )
    try:
        policy_update(run, table)
    finally:
        hook.remove()
    return seen


@pytest.mark.parametrize("loss_type", sorted(LOSS_TYPES))
def test_token_budget_gives_the_row_count_gradient(tiny_model_dir, shapes_cache, tmp_path, loss_type, scored_run):
    run, table, snapshot = scored_run
    run.cfg.algorithm.loss_type = loss_type
    run.cfg.mini_batch_size, run.cfg.max_tokens_per_micro_batch = 4, None
    rows = _gradients(run, table, snapshot)
    trajs = [t for t, k in zip(table.trajectories, table.keep.tolist()) if k]
    longest = max(t.token_ids.numel() for t in trajs)
    run.cfg.max_tokens_per_micro_batch = longest + 1  # one row and a bit: rows alone or in twos, never fours
    by_rows = [sorted(mb.rows) for mb in plan_shares(run, trajs)[0].minibatches]
    assert len(by_rows) > 3 and max(len(r) for r in by_rows) < 4
    tokens = _gradients(run, table, snapshot)
    assert rows.keys() == tokens.keys() and any(float(g.abs().sum()) > 0 for g in rows.values())
    for name, g in rows.items():
        torch.testing.assert_close(tokens[name], g, rtol=1e-5, atol=1e-7, msg=f"{loss_type}: {name}")


@pytest.fixture(scope="module")
def scored_run(tiny_model_dir, shapes_cache, tmp_path_factory):
    """A run on the tiny model with one step's scored rollouts (rewards that vary) and its initial parameters."""
    assert rl.aggregation_for_loss_type("grpo")
    run = setup_run(_cfg(tiny_model_dir, tmp_path_factory.mktemp("budget")), verbose=False)
    prompts = build_prompts(run, sample_prompts(run))
    trajectories = roll_out(run, prompts, 1)
    samples, batch = score(run, prompts, trajectories)
    tasks = task_names(samples, "domain", "shapes")
    table = build_table(
        trajectories,
        samples,
        batch,
        batch.total(),
        {d.slot: d.index for d in prompts},
        tasks=tasks,
        task_ids=task_index(tasks),
    )
    table.advantages, table.keep = compute_advantages(run, table)
    assert table.advantages.abs().sum() > 0
    snapshot = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
    return run, table, snapshot


def test_processes_agree_on_the_count_by_cutting_not_by_stand_ins(tmp_path):
    import json
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(__file__).with_name("token_budget_ranks.py")
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(port), str(tmp_path)]) for r in (0, 1)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    first, second = (json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1))
    assert first == [[[2], [3], [5, 4, 1, 0]]]  # 3 micro-batches under 40 tokens
    # alone, process 1 would need one (39 tokens): it cuts by groups (27 | 12), then group 2 by rows
    assert second == [[[3], [2], [1, 0]]]
