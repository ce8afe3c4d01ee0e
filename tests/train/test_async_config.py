"""rollout.async_generation: what it refuses before any step, each with one line naming the key (no engine
needed; the runs themselves are tests/rollout_vllm/test_async_generation.py)."""

from __future__ import annotations

import pytest

from mmreason.config import ConfigError, load_config
from mmreason.train.async_rollouts import check_async_config
from mmreason.train.config import TrainConfig


def _cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, None, ["rollout.async_generation=true", *overrides])


def test_defaults_are_off_and_one_step_of_staleness():
    cfg = load_config(TrainConfig, None, [])
    assert cfg.rollout.async_generation is False and cfg.rollout.max_staleness == 1
    check_async_config(_cfg("rollout.backend=vllm", "rollout.max_staleness=0"))  # accepted
    with pytest.raises(ConfigError, match="max_staleness"):
        load_config(TrainConfig, None, ["rollout.max_staleness=-1"])


def test_hf_generation_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"rollout.async_generation=true needs rollout.backend=vllm"):
        check_async_config(_cfg())


@pytest.mark.parametrize(
    "override, named",
    [
        ("rollout.max_turns=2", "rollout.max_turns"),
        ("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling"),
        ("refine.enabled=true", "refine.enabled"),
        ("sampler.name=difficulty", "sampler.name=difficulty"),
    ],
)
def test_within_step_regeneration_and_feedback_samplers_are_refused(override, named):
    with pytest.raises(ConfigError, match=named):
        check_async_config(_cfg("rollout.backend=vllm", override))
