"""Every shipped recipe validates against the config schema, names registered components, and sits where its
task is (``configs/<pack>/``; the quickstart recipes at the top); every accelerate config parses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mmreason.config import load_config
from mmreason.train.config import TrainConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
RECIPES = sorted(p for p in CONFIGS.rglob("*.yaml") if p.parent.name != "accelerate")


@pytest.mark.parametrize("path", RECIPES, ids=[p.relative_to(CONFIGS).as_posix() for p in RECIPES])
def test_recipe_validates_and_names_registered_components(path):
    from mmreason import rl
    from mmreason.rewarding import REWARDS
    from mmreason.sampling import SAMPLERS
    from mmreason.taskpack import TASKS

    cfg = load_config(TrainConfig, path)
    assert cfg.data.task in TASKS, cfg.data.task
    assert cfg.algorithm.estimator in rl.ESTIMATORS
    assert cfg.algorithm.policy_loss in rl.POLICY_LOSSES
    rl.aggregation_for_loss_type(cfg.algorithm.loss_type)
    assert cfg.algorithm.kl_estimator in rl.KL_ESTIMATORS
    assert cfg.sampler.name in SAMPLERS
    for reward in cfg.rewards:
        assert ":" in reward.name or reward.name in REWARDS, reward.name
    if path.parent == CONFIGS:
        assert path.stem.startswith("quickstart"), f"{path.name}: a pack's recipe goes under configs/<pack>/"
    else:
        assert path.parent.name == cfg.data.task, f"{path}: data.task is {cfg.data.task!r}"


ACCELERATE = sorted((CONFIGS / "accelerate").glob("*.yaml"))


@pytest.mark.parametrize("path", ACCELERATE, ids=[p.name for p in ACCELERATE])
def test_accelerate_config_parses(path):
    data = yaml.safe_load(path.read_text())
    assert data["distributed_type"] in {"NO", "MULTI_GPU", "FSDP"}  # DeepSpeed is refused (launch_checks.py)
    assert int(data["num_processes"]) >= 1


@pytest.mark.parametrize(
    "path",
    [p for p in RECIPES if p.parent != CONFIGS],
    ids=[p.relative_to(CONFIGS).as_posix() for p in RECIPES if p.parent != CONFIGS],
)
def test_a_pack_recipe_does_not_restate_its_packs_default_rewards(path):
    """Default rewards are stated once, in the pack; a recipe's own ``rewards:`` must change them."""
    from mmreason.taskpack import TASKS
    from mmreason.train.setup import _reward_config

    own = yaml.safe_load(path.read_text()) or {}
    if "rewards" not in own:
        return
    cfg = load_config(TrainConfig, path)
    assert cfg.rewards != [_reward_config(r) for r in TASKS.get(cfg.data.task).rewards], path


FULL_SIZE = [p for p in RECIPES if not any(w in p.stem for w in ("tiny", "small", "quickstart"))]


@pytest.mark.parametrize("path", FULL_SIZE, ids=[p.relative_to(CONFIGS).as_posix() for p in FULL_SIZE])
def test_a_full_size_recipe_checkpoints_gradients(path):
    """A 3B / 7B recipe (no ``tiny`` / ``small`` in its name) recomputes activations in backward: without it
    16-row mini-batches keep ~60-70 GB of activations at 7B (issue 48)."""
    cfg = load_config(TrainConfig, path)
    assert not cfg.model.name_or_path.startswith("runs/tiny-model"), path
    assert cfg.model.gradient_checkpointing, f"{path}: set model.gradient_checkpointing: true"
