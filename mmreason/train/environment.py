"""The run's environment: a user's (``rollout.environment``) attached to the task pack, or the pack's own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmreason.config import ConfigError
from mmreason.models.families import family_of_processor
from mmreason.rollout.env_plugin import EnvironmentConfigError, EnvironmentFactory, attach_environment, load_environment
from mmreason.taskpack import TaskPack
from mmreason.train.config import TrainConfig

if TYPE_CHECKING:
    from transformers import ProcessorMixin


def run_environment(cfg: TrainConfig, processor: ProcessorMixin, config_dir: str | None) -> EnvironmentFactory | None:
    """Return the factory ``rollout.environment`` names (None when it names none), checked before the model loads; its
    tool calls are read in the processor's model family's format."""
    r = cfg.rollout
    if not r.environment:
        return None
    try:
        return load_environment(
            r.environment,
            r.environment_args,
            base_dir=config_dir,
            tool_calls=family_of_processor(processor).tool_calls,
        )
    except EnvironmentConfigError as exc:
        raise ConfigError(str(exc)) from None


def with_environment(cfg: TrainConfig, pack: TaskPack, factory: EnvironmentFactory | None) -> TaskPack:
    """Return ``pack`` with the run's environment attached (as it is when the run names none)."""
    if factory is None:
        return pack
    return attach_environment(pack, factory, cfg.rollout.max_turns)
