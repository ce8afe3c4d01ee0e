"""Options reach the estimator and the loss they name, or the run does not start; components load by
reference like rewards."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mmreason import rl
from mmreason.config import ConfigError, load_config
from mmreason.train.config import TrainConfig, check_algorithm_options

ROOT = Path(__file__).resolve().parents[2]


def _cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, ROOT / "configs" / "quickstart.yaml", list(overrides))


def test_a_top_level_option_the_loss_does_not_take_is_an_error():
    with pytest.raises(ConfigError, match=r"epsilon_high=0.28.*'reg_grpo' takes no epsilon_high.*eps_r"):
        check_algorithm_options(_cfg("algorithm.policy_loss=reg_grpo", "algorithm.epsilon_high=0.28"))
    with pytest.raises(ConfigError, match=r"scale_rewards='batch'.*'rloo'"):
        check_algorithm_options(_cfg("algorithm.estimator=rloo", "algorithm.scale_rewards=batch"))


def _takes(loss: str) -> tuple[str, ...]:
    return rl.contract_of(rl.POLICY_LOSSES.get(loss)).takes


def test_loss_options_reach_the_loss_and_unknown_ones_are_named():
    cfg = _cfg("algorithm.policy_loss=reg_grpo", "algorithm.loss_options={eps_r: 0.05}")
    check_algorithm_options(cfg)
    assert "epsilon" not in _takes("reg_grpo") and "eps_r" in rl.options_of(rl.POLICY_LOSSES.get("reg_grpo"))
    check_algorithm_options(_cfg("algorithm.loss_options={delta: 3.0}"))  # dual-clip bound of `clipped`
    with pytest.raises(ConfigError, match=r"loss_options: policy loss 'clipped' has no option 'eps_r'"):
        check_algorithm_options(_cfg("algorithm.loss_options={eps_r: 0.05}"))
    with pytest.raises(ConfigError, match=r"loss_options.epsilon: set it as algorithm.epsilon"):
        check_algorithm_options(_cfg("algorithm.loss_options={epsilon: 0.1}"))


def test_the_training_step_reaches_losses_that_anneal_and_only_those():
    cfg = _cfg("algorithm.policy_loss=holder", "algorithm.loss_options={p_schedule: linear, schedule_steps: 10}")
    check_algorithm_options(cfg)
    assert "train_step" in _takes("holder") and "train_step" not in _takes("clipped")  # clipped takes none
    with pytest.raises(ConfigError, match=r"loss_options.train_step: set by the trainer"):
        check_algorithm_options(_cfg("algorithm.policy_loss=holder", "algorithm.loss_options={train_step: 3}"))


def test_estimator_options_are_checked_against_the_estimator():
    check_algorithm_options(_cfg("algorithm.estimator=ga_grpo", "algorithm.estimator_options={a: 0.3}"))
    with pytest.raises(ConfigError, match=r"'ga_grpo' has no option 'aa' \(did you mean 'a'\?\)"):
        check_algorithm_options(_cfg("algorithm.estimator=ga_grpo", "algorithm.estimator_options={aa: 0.3}"))


def test_an_estimator_and_a_loss_from_files_load_like_rewards(tmp_path):
    (tmp_path / "mine.py").write_text(
        "def half_grpo(rewards, group_ids, weights, *, scale: float = 0.5):\n"
        "    from mmreason.rl.estimators.grpo import grpo\n"
        "    return scale * grpo(rewards, group_ids, weights)\n"
    )
    ref = f"{tmp_path}/mine.py:half_grpo"
    check_algorithm_options(_cfg(f"algorithm.estimator={ref}", "algorithm.estimator_options={scale: 0.25}"))
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1])
    got = rl.advantages(ref, rewards, groups, scale=0.25).advantages
    torch.testing.assert_close(got, 0.25 * rl.advantages("grpo", rewards, groups).advantages)
    with pytest.raises(FileNotFoundError, match="estimator file"):
        check_algorithm_options(_cfg("algorithm.estimator=missing_file.py:fn"))


def test_cispo_refuses_the_ppo_clip_options_and_takes_its_own_bound():
    with pytest.raises(ConfigError, match=r"epsilon_high=5.0.*'cispo' takes no epsilon_high.*epsilon_max"):
        check_algorithm_options(_cfg("algorithm.policy_loss=cispo", "algorithm.epsilon_high=5.0"))
    cfg = _cfg("algorithm.policy_loss=cispo", "algorithm.loss_options={epsilon_max: 4.0}")
    check_algorithm_options(cfg)
    assert "epsilon_max" in rl.options_of(rl.POLICY_LOSSES.get("cispo"))
