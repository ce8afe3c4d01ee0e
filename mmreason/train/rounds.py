"""One round of a GRPO step: the step's prompts drawn and built, rolled out, scored (``draw_round``), each phase
timed and under the fault guard. The step (``step.py``), the asynchronous producer (``async_rollouts.py``) and
the samplers' refresh (``grpo.py``) all go through these phases, so a round is made one way.

    sample_prompts   (slot, dataset index) of this process's slice of the step's global draw
    build_prompts    the prompts as model inputs (``prompts.py``)
    roll_out         G completions per prompt: HF ``generate``, a vLLM engine, or episodes
    score            rewards [N, K] from the reward runner
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TypeVar

import torch

from mmreason.parallel.agree import hold, stopping
from mmreason.rewarding import RewardErrorLimitExceeded
from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.episode_stats import bad_calls
from mmreason.rollout.generate import GenerationSettings, generate_groups, group_seed
from mmreason.rollout.multiturn import (
    EnvironmentStartError,
    EpisodeStart,
    ended_by_fault,
    episode_context,
    run_episodes,
)
from mmreason.rollout.row_sampling import NonFiniteLogitsError
from mmreason.sampling.records import Drawn, Rollouts, no_rewards
from mmreason.train.faults import bad_sample, fault_guard
from mmreason.train.prompts import build_prompts, unseen_media
from mmreason.train.setup import Run
from mmreason.train.timing import PhaseTimes
from mmreason.types import Sample, Trajectory


def draw_round(run: Run, step: int, timed: PhaseTimes, drawn: list[tuple[int, int]]) -> Rollouts:
    """Build the drawn (slot, dataset index) prompts, roll them out, score them: each phase timed, under the
    fault guard (a failed phase leaves what it would have given: no prompts, no trajectories, NaN rewards)."""
    prompts: list[Drawn] = []
    trajectories: list[Trajectory] = []
    with timed("prompts"), fault_guard(run):
        prompts = build_prompts(run, drawn)
    with timed("generate"), fault_guard(run):
        trajectories = roll_out(run, prompts, step)
    if not trajectories:
        return Rollouts(prompts, [], [], no_rewards())
    samples, batch = samples_of(prompts, trajectories), None
    with timed("reward"), fault_guard(run):
        samples, batch = score(run, prompts, trajectories)
    return Rollouts(prompts, trajectories, samples, batch if batch is not None else nan_rewards(run, len(trajectories)))


def sample_prompts(run: Run) -> list[tuple[int, int]]:
    """Draw the (slot, dataset index) pairs of this process's slice; every process draws the same global batch."""
    acc, n = run.accelerator, run.cfg.prompts_per_step
    global_indices = run.sampler.next_indices(n * acc.num_processes)
    start = acc.process_index * n
    return list(enumerate(global_indices[start : start + n], start=start))


def roll_out(run: Run, drawn: list[Drawn], step: int) -> list[Trajectory]:
    """Roll out G trajectories per prompt (single-turn, or multi-turn when the task has an environment)."""
    r = run.cfg.rollout
    settings = GenerationSettings(r.max_completion_length, r.temperature, r.top_p, r.top_k)
    if stopping(run):
        return []
    model = run.accelerator.unwrap_model(run.model)
    model.eval()
    if run.pack.make_environment is not None and r.max_turns > 1:  # episodes: all of the step's together
        trajectories = _sampled(step, lambda: _play_episodes(run, model, drawn, settings, step))
    elif run.rollout_backend is not None:  # vLLM: the same prompts, seeds and settings
        trajectories = run.rollout_backend.generate_groups(
            [d.prompt for d in drawn],
            [d.slot for d in drawn],
            r.num_generations,
            settings,
            [group_seed(run.cfg.seed, step, d.key) for d in drawn],
        )
    else:
        # Single-turn: all groups of the step in one generate call (one per group size when the sampler sizes
        # the groups: Rollout-GDRO); each row samples with its own seed, derived from its group's (run seed,
        # step, sample key), so the split over processes changes no sample.
        trajectories = []
        for size, part in group_sizes(run, drawn):
            trajectories += _sampled(
                step,
                functools.partial(
                    generate_groups,
                    model,
                    run.processor,
                    [d.prompt for d in part],
                    [d.slot for d in part],
                    size,
                    settings=settings,
                    seeds=[group_seed(run.cfg.seed, step, d.key) for d in part],
                    with_logprobs=r.hf_sampler_logprobs,
                ),
            )
        order = {d.slot: k for k, d in enumerate(drawn)}
        trajectories.sort(key=lambda t: order[t.group_id])  # stable: each group's rows keep their order
    model.train()
    return trajectories


def group_sizes(run: Run, drawn: list[Drawn]) -> list[tuple[int, list[Drawn]]]:
    """Return (rollouts per prompt, the prompts) in order of first size: ``rollout.num_generations`` for every prompt,
    unless the sampler sizes the groups (``generations``: Rollout-GDRO), then one part per size."""
    n = run.cfg.rollout.num_generations
    counts = run.sampler.generations([d.index for d in drawn], n) if drawn else None
    if counts is None:
        return [(n, drawn)] if drawn else []
    parts: dict[int, list[Drawn]] = {}
    for d, c in zip(drawn, counts):
        parts.setdefault(int(c), []).append(d)
    return list(parts.items())


T = TypeVar("T")


class NonFiniteModelError(RuntimeError):
    """The policy's logits are not finite: the run stops (no checkpoint of such weights is written)."""


def _sampled(step: int, generate: Callable[[], T]) -> T:
    """Call ``generate()``, with non-finite logits turned into a stop that names the step."""
    try:
        return generate()
    except NonFiniteLogitsError as exc:
        raise NonFiniteModelError(
            f"step {step}: {exc}; the policy's weights are not finite (check "
            "model.name_or_path or the checkpoint resumed from)"
        ) from None


def _play_episodes(
    run: Run, model: torch.nn.Module, drawn: list[Drawn], settings: GenerationSettings, step: int
) -> list[Trajectory]:
    """Play G episodes per prompt, all together (one generate call per turn). A sample whose environment cannot start is
    left out of the step, like one that won't load; an environment error ends one episode."""
    r = run.cfg.rollout
    make_environment = run.pack.make_environment
    assert make_environment is not None  # an episodic pack (rollout.environment)
    starts = [
        EpisodeStart(d.prompt, make_environment(), d.slot, i, d.key) for d in drawn for i in range(r.num_generations)
    ]
    if not starts:
        return []
    # Room for every turn and observation within the limits: only an over-long observation cuts an episode
    max_context = episode_context(
        run.cfg.data.max_prompt_length, r.max_turns, r.max_completion_length, r.max_observation_tokens
    )
    # vLLM: the engine samples every turn of the same contexts (run_episodes feeds it the observations' media)
    sampler = run.rollout_backend if run.rollout_backend is not None else model
    results = run_episodes(
        sampler,
        run.processor,
        starts,
        settings,
        max_turns=r.max_turns,
        max_context=max_context,
        seed=run.cfg.seed,
        step=step,
        max_observation_tokens=r.max_observation_tokens,
        step_timeout_s=r.env_step_timeout_s,
        with_logprobs=run.rollout_backend is None and r.hf_sampler_logprobs,
        image_budget=(run.cfg.data.min_pixels, run.cfg.data.max_pixels),
    )
    return account_episodes(run, drawn, results)


def account_episodes(
    run: Run, drawn: list[Drawn], played: list[Trajectory | EnvironmentStartError]
) -> list[Trajectory]:
    """Return the trajectories of the played episodes, counted (in the training thread, for asynchronous episodes too). A
    sample whose environment cannot start leaves the step as a bad sample; unseen media and environment faults are
    counted and logged."""
    n = run.cfg.rollout.num_generations
    trajectories: list[Trajectory] = []
    for k, d in enumerate(drawn):
        group = played[k * n : (k + 1) * n]
        error = next((g for g in group if isinstance(g, EnvironmentStartError)), None)
        if error is not None:
            bad_sample(run, d.prompt.sample.id, error)
            continue
        for t in group:
            assert isinstance(t, Trajectory)
            if t.unseen_media:
                unseen_media(run, t.unseen_media)
            run.counters.bad_tool_calls += bad_calls(t)
            if ended_by_fault(t):
                run.counters.env_faults += 1
                run.event("env_fault", sample_id=t.sample_id, reason=str(t.end))
            trajectories.append(t)
    return trajectories


def score(run: Run, drawn: list[Drawn], trajectories: list[Trajectory]) -> tuple[list[Sample], RewardBatch]:
    """Score rewards [N, K] with the reward runner (errors are counted there, under max_reward_errors; past it the rows
    are NaN and the run stops at the step's agreement point)."""
    samples = samples_of(drawn, trajectories)
    rewards = run.rewards
    assert rewards is not None  # a GRPO run builds its reward runner (setup_run)
    try:
        batch = rewards(samples, trajectories)
    except RewardErrorLimitExceeded as exc:
        hold(run, exc)
        batch = nan_rewards(run, len(trajectories))
    finally:
        run.counters.reward_errors = rewards.total_errors
    for err in batch.errors:
        run.event("reward_error", **dataclasses.asdict(err))
    return samples, batch


def samples_of(drawn: list[Drawn], trajectories: list[Trajectory]) -> list[Sample]:
    """Return the sample of each trajectory (by its group's slot)."""
    by_slot = {d.slot: d.prompt.sample for d in drawn}
    return [by_slot[t.group_id] for t in trajectories]


def nan_rewards(run: Run, n: int) -> RewardBatch:
    """Return rewards of ``n`` rows that were not scored (a stop is held: they never reach an update)."""
    assert run.rewards is not None
    names = run.rewards.names
    return RewardBatch(torch.full((n, len(names)), float("nan")), list(names), torch.ones(len(names)))
