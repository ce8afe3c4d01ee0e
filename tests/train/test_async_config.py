"""rollout.async_generation: what it refuses before any step (one line naming the key) and the sampler state a
checkpoint saves (no engine needed; the runs themselves are tests/rollout_vllm/test_vllm_serve_async.py and, with
HF and episodes, tests/train/test_async_episodes.py)."""

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


def test_hf_generation_and_episodes_are_accepted():
    """HF samples from a frozen copy of the policy (train/async_episodes.py); episodes are generated ahead."""
    check_async_config(_cfg())
    check_async_config(_cfg("rollout.max_turns=3", "rollout.max_staleness=2"))
    check_async_config(_cfg("rollout.backend=vllm", "rollout.max_turns=3"))


@pytest.mark.parametrize(
    "override, named",
    [
        ("algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling"),
        ("within_step.name=refine", "within_step.name=refine"),
        ("sampler.name=difficulty", "sampler.name=difficulty"),
    ],
)
def test_within_step_regeneration_and_feedback_samplers_are_refused(override, named):
    with pytest.raises(ConfigError, match=named):
        check_async_config(_cfg("rollout.backend=vllm", override))


def test_a_checkpoint_state_rewinds_past_prompts_drawn_ahead():
    """Step 2 trained, step 3 drawn ahead: the saved state is the one before step 3's draw, so a sampler
    resumed from it draws step 3's prompts again, then step 4's, as the uninterrupted sampler does."""
    from mmreason.sampling.uniform import UniformSampler
    from mmreason.train.async_rollouts import RewindingSampler

    straight = UniformSampler(10, seed=3)
    want = [straight.next_indices(4) for _ in range(4)]  # steps 1-4
    sampler = RewindingSampler(UniformSampler(10, seed=3))
    assert [sampler.draw(1, 4), sampler.draw(2, 4)] == want[:2]
    sampler.trained(1)
    assert sampler.draw(3, 4) == want[2]
    sampler.trained(2)  # the checkpoint of step 2 is written now
    saved = sampler.state_dict()
    resumed = RewindingSampler(UniformSampler(10, seed=3))
    resumed.load_state_dict(saved)
    assert [resumed.draw(3, 4), resumed.draw(4, 4)] == want[2:]
    sampler.trained(3)
    assert sampler.state_dict() == {"epoch": 1, "position": 2, "seed": 3, "size": 10}  # nothing drawn ahead
