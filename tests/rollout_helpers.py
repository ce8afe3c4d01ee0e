"""Rollout calls the tests make and the package does not: one episode with its settings by position, a group of
episodes of one prompt, and the sampled continuations of one context."""

from __future__ import annotations

from collections.abc import Callable

import torch

from mmreason.rollout import multiturn
from mmreason.rollout.environment import Environment
from mmreason.rollout.generate import GenerationSettings, sample_rows
from mmreason.rollout.multiturn import EnvironmentStartError, EpisodeStart, run_episodes
from mmreason.rollout.prompts import PromptInputs
from mmreason.rollout.row_sampling import row_seeds
from mmreason.types import Trajectory

BY_POSITION = ("max_turns", "max_context", "seed", "step", "index")  # run_episode's keyword-only settings, in order


def run_episode(model, processor, prompt, env, group_id, settings, *limits, **options) -> Trajectory:
    """``mmreason.rollout.multiturn.run_episode``, whose limits and seeds are keyword-only, called with them by
    position (``run_episode(model, processor, prompt, env, 0, settings, 3, 4096, 0, 0, 0)``: ``BY_POSITION``)."""
    if len(limits) > len(BY_POSITION):
        raise TypeError(f"run_episode takes at most {len(BY_POSITION)} settings by position: {BY_POSITION}")
    named = dict(zip(BY_POSITION, limits))
    return multiturn.run_episode(model, processor, prompt, env, group_id, settings=settings, **named, **options)


def generate_multiturn_group(
    model,
    processor,
    prompt: PromptInputs,
    make_env: Callable[[], Environment],
    group_id: int,
    num_generations: int,
    settings: GenerationSettings,
    *,
    key: str | None = None,
    **limits,
) -> list[Trajectory]:
    """G episodes of one prompt, each against a fresh environment, played together (``run_episodes``, whose
    keyword arguments ``limits`` are: ``max_turns``, ``max_context``, ``seed``, ``step``, ...); turns end at EOS
    or a stop string. Raises ``EnvironmentStartError`` when an environment cannot start."""
    starts = [EpisodeStart(prompt, make_env(), group_id, i, key) for i in range(num_generations)]
    results = run_episodes(model, processor, starts, settings, **limits)
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
    return sample_rows(model, tokenizer, [context], n, settings, seeds=row_seeds(seed, n))
