"""Rollout calls the tests make and the package does not: one episode with its settings by position, a group of
episodes of one prompt, and the sampled continuations of one context."""

from __future__ import annotations

from collections.abc import Callable

import torch

from mmreason.rollout import multiturn
from mmreason.rollout.deadline import DEFAULT_STEP_TIMEOUT_S
from mmreason.rollout.environment import Environment
from mmreason.rollout.generate import GenerationSettings, sample_rows
from mmreason.rollout.multiturn import EnvironmentStartError, EpisodeStart, run_episodes
from mmreason.rollout.prompts import PromptInputs
from mmreason.rollout.row_sampling import row_seeds
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


def generate_multiturn_group(
    model,
    processor,
    prompt: PromptInputs,
    make_env: Callable[[], Environment],
    group_id: int,
    num_generations: int,
    settings: GenerationSettings,
    *,
    max_turns: int,
    max_context: int,
    seed: int,
    step: int,
    key: str | None = None,
    max_observation_tokens: int | None = None,
    step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S,
) -> list[Trajectory]:
    """G episodes of one prompt, each against a fresh environment, played together; turns end at EOS or a
    stop string. Raises ``EnvironmentStartError`` when an environment cannot start."""
    starts = [EpisodeStart(prompt, make_env(), group_id, i, key) for i in range(num_generations)]
    results = run_episodes(
        model,
        processor,
        starts,
        settings,
        max_turns=max_turns,
        max_context=max_context,
        seed=seed,
        step=step,
        max_observation_tokens=max_observation_tokens,
        step_timeout_s=step_timeout_s,
    )
    for r in results:
        if isinstance(r, EnvironmentStartError):
            raise r
    return results


def sample_tokens(
    model,
    tokenizer,
    input_ids: torch.Tensor,
    mm_token_type_ids: torch.Tensor,
    visual: dict[str, torch.Tensor],
    n: int,
    settings: GenerationSettings,
    seed: int,
) -> torch.Tensor:
    """n sampled continuations of one context -> [n, L] new token ids (right-padded with pad); row r
    samples with ``row_seeds(seed, n)[r]``, as it does inside a batched ``sample_rows`` call."""
    context = PromptInputs(None, input_ids, mm_token_type_ids, visual)
    return sample_rows(model, tokenizer, [context], n, settings, row_seeds(seed, n))
