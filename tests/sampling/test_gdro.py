"""Prompt-GDRO (docs/methods/samplers.md#gdro): pass@k bins, the bandit up-weights a bin that stays hard, seeded draws
and checkpoints.

pass rate 0.1, k = 4: pass@4 = 1 - 0.9^4 = 0.3439 -> bin 1 of edges (0.2, 0.5, 0.8); pass rate 0 -> bin 0;
pass rate 1 -> bin 3; never seen -> bin 4. After one observe with all of prompts 0-4 failing and 5-9 passing (both
drawn from the unseen bin 4), bin 4's debiased loss is 0.5 (EMA 0.9: 0.1 * 0.5 / (1 - 0.9)), log w_4 = 0.25.
"""

import pytest
import torch

from mmreason.sampling import SAMPLERS
from mmreason.sampling.gdro import GDROSampler


def test_bins_follow_pass_at_k():
    s = GDROSampler(10, k=4)
    s.pass_rate = {0: 0.1, 1: 0.0, 2: 1.0}
    assert [s.bin_of(i) for i in (0, 1, 2, 3)] == [1, 0, 3, 4]


def test_first_observation_credits_the_bin_drawn_from():
    s = GDROSampler(10)
    s.observe(list(range(10)), torch.tensor([0.0] * 5 + [1.0] * 5), torch.arange(10))
    assert s.log_w[4] == pytest.approx(0.25)
    assert [s.bin_of(i) for i in (0, 9)] == [0, 3]


def test_a_bin_that_stays_hard_gets_drawn_more():
    s = GDROSampler(20, seed=1, explore=0.0)
    rows = torch.arange(20)
    for _ in range(6):
        s.observe(list(range(20)), (rows >= 10).float(), rows)  # 0-9 always fail, 10-19 always pass
    p = s.probabilities()
    assert p[0] > 0.9 and p[0] > p[3]
    drawn = s.next_indices(200)
    assert sum(i < 10 for i in drawn) > 180


def test_seeded_draws_and_checkpoint_round_trip():
    a, b = GDROSampler(12, seed=3), GDROSampler(12, seed=3)
    a.observe([0, 1], torch.tensor([0.0, 1.0]), torch.tensor([0, 1]))
    b.load_state_dict(a.state_dict())
    assert a.next_indices(8) == b.next_indices(8)
    assert SAMPLERS.get("gdro") is GDROSampler
    with pytest.raises(ValueError, match="edges"):
        GDROSampler(5, edges=(0.8, 0.2))


def test_rollout_allocation_follows_the_square_root_rule_and_holds_the_mean_budget():
    """Budget 4: the price starts at 0.5 / 4, so an unseen prompt (sqrt(1/4) = 0.5) gets 4; a prompt that always
    fails (spread floored at 0.05) gets round(0.4) -> n_min 2. Over many draws of one hard and one open prompt
    the price settles where the mean group size is the budget."""
    s = GDROSampler(4, rollout_allocation=True, n_min=2, n_max=16)
    assert s.generations([0, 1], 4) == [4, 4]
    s.observe([0, 1], torch.tensor([0.0] * 4 + [1.0, 0.0, 1.0, 0.0]), torch.tensor([0] * 4 + [1] * 4))
    counts = s.generations([0, 1], 4)
    assert counts[1] > counts[0] == 2  # the prompt at pass rate 1/2 gets more rollouts than the one that fails
    sizes = [s.generations([0, 1], 4) for _ in range(200)]
    mean = sum(sum(c) for c in sizes[-100:]) / 200
    assert abs(mean - 4) < 0.5
    assert GDROSampler(4).generations([0], 4) is None  # off by default: every group gets the budget


def test_group_sizing_is_refused_where_groups_cannot_differ_in_size():
    from types import SimpleNamespace

    from mmreason.config import ConfigError
    from mmreason.train.config import TrainConfig
    from mmreason.train.grpo import check_group_sizing

    cfg = TrainConfig()
    run = SimpleNamespace(
        cfg=cfg,
        sampler=GDROSampler(4, rollout_allocation=True),
        pack=SimpleNamespace(make_environment=None),
        accelerator=SimpleNamespace(num_processes=2),
    )
    with pytest.raises(ConfigError, match="rollout_allocation.*2 processes"):
        check_group_sizing(run)
    cfg.rollout.backend = "vllm"
    with pytest.raises(ConfigError, match="rollout.backend=vllm"):
        check_group_sizing(run)
    run.sampler = GDROSampler(4)
    check_group_sizing(run)  # no allocation: nothing to refuse
