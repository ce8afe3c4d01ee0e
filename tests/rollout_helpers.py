"""Rollout calls the tests make and the package does not: one episode with its settings by position."""

from __future__ import annotations

from mmreason.rollout import multiturn
from mmreason.rollout.environment import Environment
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.prompts import PromptInputs
from mmreason.types import Trajectory


def run_episode(
    model,
    processor,
    prompt: PromptInputs,
    env: Environment,
    group_id: int,
    settings: GenerationSettings,
    max_turns: int,
    max_context: int,
    seed: int,
    step: int,
    index: int,
    **options,
) -> Trajectory:
    """``mmreason.rollout.multiturn.run_episode``, whose limits and seeds are keyword-only, called with them by
    position (``run_episode(model, processor, prompt, env, 0, settings, 3, 4096, 0, 0, 0)``)."""
    return multiturn.run_episode(
        model,
        processor,
        prompt,
        env,
        group_id,
        settings,
        max_turns=max_turns,
        max_context=max_context,
        seed=seed,
        step=step,
        index=index,
        **options,
    )
