"""What asynchronous generation (``train/async_rollouts.py``) needs beyond one batch call: multi-turn episodes
played in the producer's thread, the frozen policy copy an HF run samples from, and the version metrics.

Episodes (``play_episodes``) are the synchronous run's (``train/step.py``: the same starts, seeds and limits), with
the engine held only around each turn's sampling call (``TurnGate``): a weight push that comes while an episode is
in flight lands between two of its turns and the episode goes on under the new weights, a partial rollout in the
sense of AReaL and slime, cut at turn boundaries. Each sampled token records the version that drew it
(``Trajectory.token_versions``) and its log-prob under that version (``rollout_logprobs``), so the trainer's
importance correction (``train/update.py``, ``rl/rollout_correction.py``) weighs each token by its own behaviour
policy. The counting a step does for its episodes (a sample whose environment cannot start, environment
faults, unseen media) happens in the training thread, when the step takes them (``rounds.account_episodes``).

``PolicyCopy``: with ``rollout.backend: hf`` the producer samples from a deep copy of the policy (its weights
loaded from the policy at every push), never from the weights the optimizer is changing. It costs a second copy
of the weights in memory; a vLLM engine is the fast path, the copy keeps the same run on CPU and in tests.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch

from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.multiturn import (
    EnvironmentStartError,
    EpisodeStart,
    TurnGate,
    episode_context,
    run_episodes,
)
from mmreason.sampling.records import Drawn
from mmreason.types import Trajectory

if TYPE_CHECKING:
    from mmreason.train.setup import RolloutEngine, Run

Played = list[Trajectory | EnvironmentStartError]


class PolicyCopy:
    """A frozen deep copy of the policy for the producer's thread (``rollout.backend: hf``): no gradients, eval
    mode, its weights replaced by the policy's at each push (``load``)."""

    # an HF model to ``run_episodes`` and ``generate_groups``, not an engine
    is_rollout_backend = False

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = copy.deepcopy(model)
        self.model.requires_grad_(False)
        self.model.eval()

    def load(self, model: torch.nn.Module) -> None:
        """Take the policy's current weights (the push of an HF run)."""
        with torch.no_grad():
            self.model.load_state_dict(model.state_dict())


def is_episodic(run: Run) -> bool:
    """Tell whether the run's rollouts are episodes (the task has an environment and ``rollout.max_turns > 1``)."""
    return run.pack.make_environment is not None and run.cfg.rollout.max_turns > 1


def play_episodes(
    run: Run,
    sampler: torch.nn.Module | RolloutEngine,
    drawn: list[Drawn],
    step: int,
    gate: TurnGate,
    *,
    with_logprobs: bool,
) -> Played:
    """Play G episodes per drawn prompt together, as ``train/step.py`` plays them, the engine (``sampler``: an engine,
    or the policy copy's model) held by ``gate`` around each turn only. One entry per episode."""
    r = run.cfg.rollout
    make_environment = run.pack.make_environment
    assert make_environment is not None  # is_episodic
    starts = [
        EpisodeStart(d.prompt, make_environment(), d.slot, i, d.key) for d in drawn for i in range(r.num_generations)
    ]
    if not starts:
        return []
    return run_episodes(
        sampler,
        run.processor,
        starts,
        GenerationSettings(r.max_completion_length, r.temperature, r.top_p, r.top_k),
        max_turns=r.max_turns,
        max_context=episode_context(
            run.cfg.data.max_prompt_length, r.max_turns, r.max_completion_length, r.max_observation_tokens
        ),
        seed=run.cfg.seed,
        step=step,
        max_observation_tokens=r.max_observation_tokens,
        step_timeout_s=r.env_step_timeout_s,
        with_logprobs=with_logprobs,
        turn_gate=gate,
        image_budget=(run.cfg.data.min_pixels, run.cfg.data.max_pixels),  # as the synchronous step fits them
    )


def stamp_versions(trajectories: list[Trajectory], version: int) -> None:
    """Stamp a single-turn batch sampled whole under ``version``: every sampled token is of that version."""
    for t in trajectories:
        t.policy_version = version
        t.token_versions = torch.where(t.action_mask.bool(), version, -1).long()


def version_metrics(step: int, trajectories: list[Trajectory]) -> dict[str, float]:
    """Measure the staleness of step ``step``'s rollouts against the weights it trains (those of the end of step - 1).

    ``async/staleness_mean`` / ``async/max_staleness``: over trajectories, (step - 1) - the version of its first
    sampled token (the oldest); ``async/token_staleness_mean``: over sampled tokens; ``async/partial_share``: the
    share of trajectories sampled under more than one version (an episode that went on across a push);
    ``async/version_min`` / ``async/version_max``: the oldest and newest version that sampled a token."""
    versions = [_sampled_versions(t) for t in trajectories]
    versions = [v for v in versions if v.numel()]
    if not versions:
        return {"async/staleness_mean": 0.0, "async/max_staleness": 0.0}
    oldest = torch.stack([v.min() for v in versions]).float()  # [N]
    every = torch.cat(versions).float()  # [tokens]
    stale = (step - 1) - oldest
    return {
        "async/staleness_mean": float(stale.mean()),
        "async/max_staleness": float(stale.max()),
        "async/token_staleness_mean": float(((step - 1) - every).mean()),
        "async/partial_share": sum(int(v.max() != v.min()) for v in versions) / len(versions),
        "async/version_min": float(every.min()),
        "async/version_max": float(every.max()),
    }


def _sampled_versions(t: Trajectory) -> torch.Tensor:
    """Return the version of each token ``t``'s sampler drew [sampled tokens] (its trained tokens)."""
    if t.token_versions is None:
        v = -1 if t.policy_version is None else t.policy_version
        return torch.full((int(t.action_mask.sum()),), v, dtype=torch.long)
    return t.token_versions[(t.action_mask.bool()) & (t.token_versions >= 0)]
