"""Off-policy generation, one or k steps ahead (``rollout.async_generation``; docs/training.md "Asynchronous
generation", docs/vllm.md).

A producer owns the background generation and the policy version counter. Step s's prompts are drawn and
built in the training thread (the sampler is drawn in step order, so the prompts are the synchronous run's),
then a background thread hands them to the rollout backend's one batch call (``generate_groups``: the vLLM
engine, in this process with weights of its own, or the ``mmreason vllm-serve`` client; with
``rollout.backend: hf`` a frozen copy of the policy, ``async_episodes.PolicyCopy``) while the training thread goes
on with the previous step's update. The engine is shared through one lock (``EngineLock``): a weight push
waits for the generation in flight (``async/update_wait_s``) and goes before any generation queued behind it,
so the weights reach the engine as soon as an update finishes.

Episodes (a task with an environment and ``rollout.max_turns > 1``) hold the engine one turn at a time
(``async_episodes.play_episodes``): a push lands between two turns and the episode goes on under the new
weights (a partial rollout); each token's version is on the trajectory (``token_versions``) and its log-prob
under that version is the behaviour policy the per-token importance correction divides by.

Versions: the engine holds version v after the push of step v's update (v = 0: the initial weights, or the
checkpoint's on resume). A generation for step s may start once ``(s - 1) - v <= rollout.max_staleness``;
every trajectory carries the ``policy_version`` of its first turn and the version of each token, and the step logs
the staleness ``(s - 1) - version`` (``async_episodes.version_metrics``; the synchronous run's is 0). With ``max_staleness: 0`` step s is generated only
after step s - 1's push, from the same prompts, seeds and weights as the synchronous run: the same rows.

The loss treats the sampler's log-probs (``rollout_logprobs``) as the behaviour policy, through the existing
rollout correction (``train/update.py``: truncated importance sampling, on by default, per token).

Checkpoints: prompts drawn for steps that have not trained yet are not saved with a checkpoint; the sampler's
state in it is the one before the oldest such draw (``RewindingSampler``), so a resumed run draws them again
(the same prompts, seeds from (run seed, step, sample)) and generates them with the checkpoint's weights. No
prompt is trained twice or skipped; the rows of the first resumed steps may differ from the uninterrupted run's,
which sampled them with older weights. The prompts a stop leaves drawn but untrained are named in the run's
``async_redrawn`` event.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import torch

from mmreason.config import ConfigError
from mmreason.rollout.generate import GenerationSettings, generate_groups, group_seed
from mmreason.sampling.records import Drawn, Rollouts, no_rewards
from mmreason.train.async_episodes import (
    Played,
    PolicyCopy,
    is_episodic,
    play_episodes,
    stamp_versions,
    version_metrics,
)
from mmreason.train.config import TrainConfig
from mmreason.train.faults import fault_guard
from mmreason.train.prompts import build_prompts
from mmreason.train.rounds import account_episodes, nan_rewards, samples_of, score
from mmreason.train.timing import PhaseTimes
from mmreason.types import Trajectory

if TYPE_CHECKING:
    from mmreason.sampling.base import PromptSampler
    from mmreason.train.setup import RolloutEngine, Run


def check_async_config(cfg: TrainConfig) -> None:
    """Raise, before any step, on what one-step-off generation cannot run with (each error names its key)."""
    r = cfg.rollout
    if not r.async_generation:
        return
    key = "rollout.async_generation=true"
    # rollout.backend=hf samples from a frozen copy of the policy (async_episodes.PolicyCopy), never from the
    # weights the optimizer is changing; an engine holds weights of its own
    within = "it rolls out again within a step, on the engine the next step is generating on"
    refused = [
        ("algorithm.dynamic_sampling", cfg.algorithm.dynamic_sampling, within),
        (f"within_step.name={cfg.within_step.name}", cfg.within_step.name is not None, within),
        (
            f"sampler.name={cfg.sampler.name}",
            cfg.sampler.name != "uniform",
            "prompts are drawn a step ahead, before the training feedback an adaptive sampler reads (use uniform)",
        ),
    ]
    for what, on, why in refused:
        if on:
            raise ConfigError(f"{key} does not combine with {what}: {why}")


def start_async_rollouts(run: Run, first_step: int) -> AsyncRollouts | None:
    """Start, with ``rollout.async_generation``, the producer for a run whose next step is ``first_step``, installed on
    ``run``. It wraps ``run.rollout_backend`` in its ``EngineLock`` and ``run.sampler`` in a ``RewindingSampler``; the
    loop calls this where it starts the engine. None without asynchronous generation."""
    if not run.cfg.rollout.async_generation:
        return None
    run.async_rollouts = AsyncRollouts(run, first_step)
    return run.async_rollouts


T = TypeVar("T")


@dataclass
class Job:
    """One step's generation: its prompts, then the rows the background thread returns (or its error)."""

    step: int
    prompts: list[Drawn]
    version: int = -1  # the engine's version when the generation started
    trajectories: list[Trajectory] = field(default_factory=list)
    # episodes: one entry per episode, counted when the step takes them
    played: Played | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class EngineLock:
    """The backend, shared by the producer's thread and the training thread (weight pushes, the in-training
    eval): every call holds one lock; a push waiting for it goes before the next queued generation."""

    def __init__(self, backend: RolloutEngine, producer: AsyncRollouts) -> None:
        self._backend, self._producer = backend, producer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def generate_groups(self, *args: Any, **kwargs: Any) -> list[Trajectory]:
        with self._producer.engine:
            return self._backend.generate_groups(*args, **kwargs)

    def sample(self, *args: Any, **kwargs: Any) -> Any:
        with self._producer.engine:
            return self._backend.sample(*args, **kwargs)

    def sync_weights(self, *args: Any, **kwargs: Any) -> float:
        return self._producer.push(lambda: self._backend.sync_weights(*args, **kwargs))

    def close(self) -> None:
        self._producer.close()
        self._backend.close()


class RewindingSampler:
    """The run's prompt sampler, whose saved state is the one before the oldest draw not yet trained: a
    checkpoint never records prompts it does not hold rollouts for."""

    def __init__(self, sampler: PromptSampler) -> None:
        self._sampler = sampler
        self.pending: deque[tuple[int, dict[str, Any]]] = deque()  # (step, sampler state before its draw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sampler, name)

    def draw(self, step: int, n: int) -> list[int]:
        self.pending.append((step, copy.deepcopy(self._sampler.state_dict())))
        return self._sampler.next_indices(n)

    def trained(self, step: int) -> None:
        while self.pending and self.pending[0][0] <= step:
            self.pending.popleft()

    def state_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.pending[0][1]) if self.pending else self._sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending.clear()
        self._sampler.load_state_dict(state)


class AsyncRollouts:
    """The producer: draws and builds each step's prompts in the training thread, generates them in a
    background thread as soon as the staleness bound allows, and hands them out scored, step by step."""

    def __init__(self, run: Run, first_step: int) -> None:
        if run.accelerator.num_processes > 1:
            raise ConfigError("rollout.async_generation=true runs with one training process")
        self.run, self.max_staleness = run, run.cfg.rollout.max_staleness
        # the engine holds the weights of the end of the last finished step
        self.version = first_step - 1
        self.engine = threading.RLock()
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._jobs: dict[int, Job] = {}
        self._pushing, self._closed = 0, False
        self.update_wait_s = 0.0  # the last push's wait for the generation in flight
        self.last_drawn = first_step - 1
        self.backend = run.rollout_backend
        # rollout.backend=hf: a frozen copy of the policy samples (its weights taken at each push, push_copy)
        self.copy = PolicyCopy(run.accelerator.unwrap_model(run.model)) if self.backend is None else None
        if self.backend is not None:
            run.rollout_backend = EngineLock(self.backend, self)
        self.sampler = run.sampler if isinstance(run.sampler, RewindingSampler) else RewindingSampler(run.sampler)
        run.sampler = self.sampler
        self._thread = threading.Thread(target=self._work, name="async-rollouts", daemon=True)
        self._thread.start()

    # ---- the training thread ----------------------------------------------------------------------------

    def take(self, step: int, timed: PhaseTimes) -> Rollouts:
        """Take step ``step``'s rollouts, scored; then the next generations the staleness bound allows start."""
        self.version = max(self.version, step - 1)  # every earlier step's update was pushed (or skipped)
        if step not in self._jobs:
            self._launch(step, timed)
        job = self._jobs.pop(step)
        t = time.perf_counter()
        with timed("generate"):
            job.done.wait()
        waited = time.perf_counter() - t
        self.sampler.trained(step)  # from here a checkpoint is of this step or later
        prompts, trajectories = job.prompts, job.trajectories
        with fault_guard(self.run):
            if job.error is not None:
                raise job.error
            if job.played is not None:  # episodes: counted here, in the training thread
                trajectories = account_episodes(self.run, prompts, job.played)
        self._fill(timed)  # step + 1 ... generate while this step's update runs
        metrics = {**version_metrics(step, trajectories), "async/generation_wait_s": waited}
        if not trajectories:
            return Rollouts(prompts, [], [], no_rewards(), metrics=metrics)
        samples, batch = samples_of(prompts, trajectories), None
        with timed("reward"), fault_guard(self.run):
            samples, batch = score(self.run, prompts, trajectories)
        batch = batch if batch is not None else nan_rewards(self.run, len(trajectories))
        return Rollouts(prompts, trajectories, samples, batch, metrics=metrics)

    def push(self, send: Callable[[], T]) -> T:
        """Push weights (``send``): wait for the generation (or the episode turn) in flight, go before the queued ones;
        then the engine's version is the finished step's and the generations it allows start."""
        t = time.perf_counter()
        with self._cond:
            self._pushing += 1
        try:
            with self.engine:
                self.update_wait_s = time.perf_counter() - t
                out = send()
                self.version = self.run.step  # before any generation can start on the new weights
        finally:
            with self._cond:
                self._pushing -= 1
                self._cond.notify_all()
        # the new version allows one more step ahead: it starts on the idle engine
        if self.max_staleness > 0:
            self._fill(None)
        return out

    def push_copy(self, model: torch.nn.Module) -> dict[str, float]:
        """Push the weights of an HF run: the policy copy takes ``model``'s weights
        (``rollout_backend.sync_weights``)."""
        t = time.perf_counter()
        assert self.copy is not None
        copy_ = self.copy
        self.push(lambda: copy_.load(model))
        return {"time/weight_sync": time.perf_counter() - t, **self.metrics_after_push()}

    def metrics_after_push(self) -> dict[str, float]:
        return {"async/update_wait_s": self.update_wait_s}

    def close(self) -> None:
        """Stop the producer; the prompts drawn and not trained are named (a resumed run draws them again)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)
        ahead = sorted(self._jobs)
        if ahead:
            ids = [d.prompt.sample.id for s in ahead for d in self._jobs[s].prompts]
            self.run.event("async_redrawn", steps=ahead, sample_ids=ids)

    def _fill(self, timed: PhaseTimes | None) -> None:
        """Launch every step the staleness bound allows now: s with (s - 1) - version <= max_staleness."""
        while self.last_drawn + 1 <= min(self.version + self.max_staleness + 1, self.run.cfg.max_steps):
            self._launch(self.last_drawn + 1, timed)

    def _launch(self, step: int, timed: PhaseTimes | None) -> None:
        """Draw and build ``step``'s prompts (this thread: the sampler in step order), queue the generation."""
        acc, n = self.run.accelerator, self.run.cfg.prompts_per_step
        indices = self.sampler.draw(step, n * acc.num_processes)
        drawn = list(enumerate(indices[:n]))
        prompts: list[Drawn] = []
        with timed("prompts") if timed is not None else _nothing(), fault_guard(self.run):
            prompts = build_prompts(self.run, drawn)
        job = Job(step, prompts)
        self._jobs[step] = job
        self.last_drawn = step
        with self._cond:
            self._queue.append(job)
            self._cond.notify_all()

    # ---- the background thread ------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or (self._queue and not self._pushing))
                if self._closed:
                    return
                job = self._queue.popleft()
            try:
                self._generate(job)
            except BaseException as exc:  # noqa: BLE001 - raised in the training thread by ``take``
                job.error = exc
            finally:
                job.done.set()

    @contextmanager
    def _turn(self) -> Iterator[int]:
        """Hold the engine for one sampling call, after any push waiting for it; yields its version."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or not self._pushing)
        with self.engine:
            if self._closed:
                raise RuntimeError("the producer closed while an episode was in flight")
            yield self.version

    def _generate(self, job: Job) -> None:
        """Run ``rounds.roll_out`` in the background: one batch call, or the step's episodes one turn at a time, without
        touching the model being trained."""
        r, seed = self.run.cfg.rollout, self.run.cfg.seed
        if not job.prompts:
            return
        sampler = self.backend if self.backend is not None else self.copy.model  # type: ignore[union-attr]
        with_logprobs = self.backend is None  # an engine returns its log-probs anyway
        if is_episodic(self.run):
            versions: list[int] = []

            @contextmanager
            def gate() -> Iterator[int]:
                with self._turn() as version:
                    versions.append(version)
                    yield version

            job.played = play_episodes(self.run, sampler, job.prompts, job.step, gate, with_logprobs=with_logprobs)
            job.version = min(versions, default=self.version)
            for t in job.played:
                if isinstance(t, Trajectory):
                    t.policy_version = job.version
            return
        with self._turn() as version:
            job.version = version
            settings = GenerationSettings(r.max_completion_length, r.temperature, r.top_p, r.top_k)
            seeds = [group_seed(seed, job.step, d.key) for d in job.prompts]
            prompts, slots = [d.prompt for d in job.prompts], [d.slot for d in job.prompts]
            if self.backend is not None:
                job.trajectories = self.backend.generate_groups(prompts, slots, r.num_generations, settings, seeds)
            else:
                job.trajectories = generate_groups(
                    sampler,
                    self.run.processor,
                    prompts,
                    slots,
                    r.num_generations,
                    settings=settings,
                    seeds=seeds,
                    with_logprobs=True,
                )
        stamp_versions(job.trajectories, job.version)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False
