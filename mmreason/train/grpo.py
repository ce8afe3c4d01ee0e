"""The GRPO-family training loop. One step reads like the flow:

    sample prompts -> build prompts -> roll out G completions each -> rewards -> advantages
    -> num_iterations passes of mini-batch updates (policy loss + KL) -> optimizer step

Each phase is a function here (the policy update in ``update.py``, the step's metrics in ``metrics.py``);
the loop owns no task-specific code. Estimators, losses, aggregations and KL estimators are looked up by
name in ``mmreason.rl``'s registries.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import time
from pathlib import Path
from typing import Any

import torch

from mmreason.media import MediaError
from mmreason.media.video_plan import VideoLimits
from mmreason.parallel.agree import any_rank, hold, settle, stopping
from mmreason.parallel.sharding import gathered
from mmreason.rollout.backends import EngineDied
from mmreason.rollout.generate import GenerationSettings, generate_groups, group_seed
from mmreason.rollout.multiturn import (
    EnvironmentStartError,
    EpisodeStart,
    ended_by_fault,
    episode_context,
    run_episodes,
)
from mmreason.rollout.prompts import PromptInputs, PromptTooLong, build_prompt
from mmreason.rollout.row_sampling import NonFiniteLogitsError
from mmreason.rollout.visibility import UnseenMedia
from mmreason.train.checkpoint import resume, save_checkpoint
from mmreason.train.collect import collect_rollouts
from mmreason.train.config import TrainConfig
from mmreason.train.logging import RunLogger
from mmreason.train.metrics import completion_rows, rollout_metrics
from mmreason.train.records import Drawn, Scored, task_index, task_names
from mmreason.train.rollout_backend import check_backend_config, close_backend, make_backend, sync_weights
from mmreason.train.setup import Run, setup_run
from mmreason.train.table import StepTable, build_table, check_needs
from mmreason.train.update import accepted_options, check_algorithm_options, policy_update
from mmreason.types import Trajectory


class RunStopped(RuntimeError):
    """A configured fault limit was passed; a checkpoint was saved first."""


def sample_prompts(run: Run) -> list[tuple[int, int]]:
    """(slot, dataset index) of this process's slice; every process draws the same global batch."""
    acc, n = run.accelerator, run.cfg.prompts_per_step
    global_indices = run.sampler.next_indices(n * acc.num_processes)
    start = acc.process_index * n
    return list(enumerate(global_indices[start : start + n], start=start))


def build_prompts(run: Run, drawn: list[tuple[int, int]]) -> list[Drawn]:
    """Prompts for the drawn samples; broken media and over-long prompts are counted and skipped."""
    if stopping(run):
        return []
    unseen = run.counters.unseen_media
    out = [Drawn(slot, index, load_prompt(run, index)) for slot, index in drawn]
    check_most_seen(run, run.counters.unseen_media - unseen, len(drawn))
    return [d for d in out if d.prompt is not None]


def check_most_seen(run: Run, unseen: int, drawn: int) -> None:
    """Stop the run (``hold``) when most of a step's prompts would not show the model their media."""
    if drawn and unseen > drawn / 2:
        hold(run, RunStopped(f"{unseen} of {drawn} prompts at step {run.step} would not show the model their "
                             f"media (see {unseen_dump(run)}): check the chat template and the pixel budgets"))


def unseen_dump(run: Run):
    from pathlib import Path

    return Path(run.cfg.output_dir) / "unseen_media.jsonl"


def unseen_media(run: Run, report: dict) -> None:
    """Count and dump (ids, counts, paths) a prompt or observation whose media would not reach the model."""
    import json

    run.counters.unseen_media += 1
    run.event("unseen_media", **report)
    path = unseen_dump(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"step": run.step, **report}, default=str) + "\n")


def load_prompt(run: Run, index: int, split: str = "train") -> PromptInputs | None:
    """One dataset sample as model inputs for this draw, or None (counted and logged) when it cannot be.

    Past ``max_bad_samples`` broken samples the run stops on every process at the step's agreement point
    (``agree.settle``; the loop saves a checkpoint first).
    """
    sample = run.pack.prepare(run.dataset[index], split=split, seed=run.cfg.seed, step=run.step)
    return prompt_of(run, sample)


def prompt_of(run: Run, sample) -> PromptInputs | None:
    """``sample`` as model inputs, or None (counted and logged) when it cannot be (``load_prompt``)."""
    d = run.cfg.data
    try:
        return build_prompt(run.processor, sample, max_prompt_length=d.max_prompt_length, min_pixels=d.min_pixels,
                            max_pixels=d.max_pixels, overflow=d.prompt_overflow, system_prompt=d.system_prompt,
                            video_limits=VideoLimits(d.video_fps, d.video_max_frames, d.video_min_pixels,
                                                     d.video_max_pixels, d.video_total_pixels))
    except PromptTooLong as exc:
        run.counters.filtered_prompts += 1
        run.event("prompt_filtered", sample_id=sample.id, reason=str(exc))
    except UnseenMedia as exc:
        unseen_media(run, exc.report)
    except (MediaError, OSError, ValueError) as exc:
        bad_sample(run, sample.id, exc)
    return None


def bad_sample(run: Run, sample_id: str, exc: BaseException) -> None:
    """Count and log a sample that cannot be used; past ``max_bad_samples`` the run stops (``hold``)."""
    run.counters.bad_samples += 1
    run.event("bad_sample", sample_id=sample_id, reason=str(exc))
    if run.counters.bad_samples > run.cfg.max_bad_samples:
        stop = RunStopped(f"{run.counters.bad_samples} broken samples (max_bad_samples="
                          f"{run.cfg.max_bad_samples}); last: {sample_id!r}: {exc}")
        stop.__cause__ = exc
        hold(run, stop)


def roll_out(run: Run, drawn: list[Drawn], step: int) -> list[Trajectory]:
    """G trajectories per prompt (single-turn, or multi-turn when the task has an environment)."""
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
            [d.prompt for d in drawn], [d.slot for d in drawn], r.num_generations, settings,
            [group_seed(run.cfg.seed, step, d.key) for d in drawn])
    else:
        # Single-turn: all groups of the step in one generate call; each row samples with its own seed, derived
        # from its group's (run seed, step, sample key), so the split over processes changes no sample.
        trajectories = _sampled(step, lambda: generate_groups(
            model, run.processor, [d.prompt for d in drawn], [d.slot for d in drawn], r.num_generations, settings,
            [group_seed(run.cfg.seed, step, d.key) for d in drawn]))
    model.train()
    return trajectories


class NonFiniteModelError(RuntimeError):
    """The policy's logits are not finite: the run stops (no checkpoint of such weights is written)."""


def _sampled(step: int, generate):
    """``generate()``, with non-finite logits turned into a stop that names the step."""
    try:
        return generate()
    except NonFiniteLogitsError as exc:
        raise NonFiniteModelError(f"step {step}: {exc}; the policy's weights are not finite (check "
                                  "model.name_or_path or the checkpoint resumed from)") from None


def _play_episodes(run: Run, model, drawn: list[Drawn], settings: GenerationSettings, step: int) -> list[Trajectory]:
    """G episodes per prompt, all played together (one generate call per turn). A sample whose environment
    cannot start is left out of the step, like one that won't load; an environment error ends one episode."""
    r = run.cfg.rollout
    starts = [EpisodeStart(d.prompt, run.pack.make_environment(), d.slot, i, d.key)
              for d in drawn for i in range(r.num_generations)]
    if not starts:
        return []
    # Room for every turn and observation within the limits: only an over-long observation cuts an episode
    max_context = episode_context(run.cfg.data.max_prompt_length, r.max_turns, r.max_completion_length,
                                  r.max_observation_tokens)
    results = run_episodes(model, run.processor, starts, settings, r.max_turns, max_context, run.cfg.seed, step,
                           r.max_observation_tokens, r.env_step_timeout_s)
    trajectories = []
    for k, d in enumerate(drawn):
        group = results[k * r.num_generations:(k + 1) * r.num_generations]
        error = next((g for g in group if isinstance(g, EnvironmentStartError)), None)
        if error is not None:
            bad_sample(run, d.prompt.sample.id, error)
            continue
        for t in group:
            if t.reward_info.get("unseen_media"):
                unseen_media(run, t.reward_info["unseen_media"])
            if ended_by_fault(t):
                run.counters.env_faults += 1
                run.event("env_fault", sample_id=t.sample_id, reason=t.reward_info["ended"])
        trajectories += group
    return trajectories


def score(run: Run, drawn: list[Drawn], trajectories: list[Trajectory]):
    """Rewards [N, K] from the reward runner (errors are counted there, under max_reward_errors; past it
    the rows are NaN and the run stops at the step's agreement point)."""
    from mmreason.rewarding import RewardErrorLimitExceeded

    by_slot = {d.slot: d.prompt.sample for d in drawn}
    samples = [by_slot[t.group_id] for t in trajectories]
    try:
        batch = run.rewards(samples, trajectories)
    except RewardErrorLimitExceeded as exc:
        hold(run, exc)
        batch = _nan_rewards(run, len(trajectories))
    finally:
        run.counters.reward_errors = run.rewards.total_errors
    for err in batch.errors:
        run.event("reward_error", **dataclasses.asdict(err))
    return samples, batch


def compute_advantages(run: Run, table: StepTable) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages [N] and the keep mask [N] (estimator loss mask x dynamic-sampling filter), from the table.

    The estimator gets ``algorithm.estimator_options``, the columns it declared (``needs``) from the table,
    and ``reward_missing`` as its ``missing`` option (checked at start-up by ``check_algorithm_options``)."""
    from mmreason import rl

    a = run.cfg.algorithm
    fn = rl.ESTIMATORS.get(a.estimator)
    options = dict(a.estimator_options)
    accepted = accepted_options(fn)
    if "scale_rewards" in accepted and "scale_rewards" not in options:
        options["scale_rewards"] = a.scale_rewards
    if "task_ids" in accepted and "task_ids" not in options:
        options["task_ids"] = table.task_ids
    for need in rl.needs_of(fn):
        options[need] = table.column(need)
    if run.cfg.reward_missing != "zero":
        options["missing"] = run.cfg.reward_missing
    result = rl.advantages(a.estimator, table.rewards, table.group_ids, weights=table.weights, **options)
    keep = result.keep_mask()
    if a.dynamic_sampling:
        filtered = rl.dynamic_sampling_filter(table.total, table.group_ids)
        keep = keep & filtered.keep
        run.counters.dropped_groups += int(filtered.num_dropped)
    return result.advantages, keep


def check_estimator_needs(run: Run) -> None:
    """Start-up: every column the estimator declared comes from a configured reward or the samples."""
    from mmreason import rl
    from mmreason.rewarding import REWARDS, reward_info

    name = run.cfg.algorithm.estimator
    needs = rl.needs_of(rl.ESTIMATORS.get(name))
    if not needs:
        return
    producers: dict[str, list[str]] = {}
    for reward_name in REWARDS.names():
        info = reward_info(REWARDS.get(reward_name))
        for key in info.keys if info else ():
            producers.setdefault(key, []).append(f"{reward_name} (its {key!r} sub-score)")
    sample = run.dataset[0] if run.dataset else None
    check_needs("estimator", name, needs, run.rewards.announced_names, sample, producers)


def train_step(run: Run, step: int) -> dict[str, Any]:
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    with gathered(run.accelerator.unwrap_model(run.model)):  # a sharded model generates whole (mmreason.parallel)
        got = collect_rollouts(run, step, sample_prompts, *guarded(run, build_prompts, roll_out, score),
                               build_sample=guarded(run, prompt_of)[0])
    settle(run, RunStopped)  # a fault on any process stops every process here
    prompts, trajectories = got.prompts, got.trajectories
    t2 = time.perf_counter()
    metrics: dict[str, Any] = dict(got.metrics)
    run.counters.dropped_groups += got.discarded_groups
    if run.cfg.algorithm.dynamic_sampling:
        metrics["dynamic_sampling/extra_draws"] = float(got.extra_draws)
    if any_rank(run.accelerator, not trajectories):  # every process skips when one has nothing to train on
        if trajectories:
            run.event("update_skipped", step=step, reason="another process has no trajectories this step")
        metrics["skipped_update"] = 1.0
        times.update(prompts=got.prompt_seconds, generate=t2 - t0 - got.reward_seconds - got.prompt_seconds,
                     reward=got.reward_seconds, update=0.0)
    else:
        samples, batch = got.samples, got.batch
        tasks = task_names(samples, run.cfg.algorithm.task_key or run.pack.task_key, run.pack.name)
        total = batch.total(run.cfg.reward_missing)
        table = build_table(trajectories, samples, batch, total, {d.slot: d.index for d in prompts}, tasks,
                            task_index(tasks))
        adv, keep = compute_advantages(run, table)
        scored = Scored(trajectories, samples, batch.values, batch.names, total, adv, keep, tasks)
        observe_sampler(run, prompts, trajectories, total)
        metrics.update(policy_update(run, scored))
        if "entropy" in metrics:
            run.prev_entropy = float(metrics["entropy"])
        metrics.update(sync_weights(run))  # the engine samples the next step with the updated policy
        t4 = time.perf_counter()
        metrics.update(rollout_metrics(run, scored))
        times.update(prompts=got.prompt_seconds, generate=t2 - t0 - got.reward_seconds - got.prompt_seconds,
                     reward=got.reward_seconds, update=t4 - t2)
        if run.cfg.log_completions_steps and step % run.cfg.log_completions_steps == 0 and run.logger:
            run.logger.completions(step, completion_rows(scored))
    times["step"] = time.perf_counter() - t0
    times["other"] = times["step"] - times["prompts"] - times["generate"] - times["reward"] - times["update"]
    metrics.update({f"time/{k}": v for k, v in times.items()})
    metrics["lr"] = run.scheduler.get_last_lr()[0]
    metrics.update({f"count/{k}": v for k, v in run.counters.as_dict().items()})
    return metrics


def observe_sampler(run: Run, drawn: list[Drawn], trajectories: list[Trajectory], total: torch.Tensor) -> None:
    """Training feedback for adaptive samplers: per-trajectory rewards keyed by dataset index."""
    index_of = {d.slot: d.index for d in drawn}
    indices = torch.tensor([index_of[t.group_id] for t in trajectories])  # [N]
    kwargs = {}
    if "completions" in inspect.signature(run.sampler.observe).parameters:
        kwargs["completions"] = [t.completion_text for t in trajectories]
    run.sampler.observe([d.index for d in drawn], total, indices, **kwargs)


def refresh_sampler(run: Run, step: int) -> None:
    """Samplers scored from fresh rollouts (VAS ``mode: rollouts``): roll out their prompts, hand back
    ``{dataset index: (rewards, completions)}``. Prompts are split over processes and gathered."""
    due = getattr(run.sampler, "refresh_due", None)
    if due is None or not due(step):
        return
    acc, n = run.accelerator, max(run.cfg.prompts_per_step, 1)
    mine = run.sampler.refresh_indices()[acc.process_index :: acc.num_processes]
    scores: dict[int, tuple[list[float], list[str]]] = {}
    build, generate, scorer = guarded(run, build_prompts, roll_out, score)
    with gathered(acc.unwrap_model(run.model)):
        for start in range(0, len(mine), n):
            drawn = build(run, [(slot, index) for slot, index in enumerate(mine[start : start + n])])
            trajectories = generate(run, drawn, step)
            if not trajectories:
                continue
            _, batch = scorer(run, drawn, trajectories)
            index_of = {d.slot: d.index for d in drawn}
            for t, reward in zip(trajectories, batch.total(run.cfg.reward_missing).tolist()):
                rewards, texts = scores.setdefault(index_of[t.group_id], ([], []))
                rewards.append(reward)
                texts.append(t.completion_text)
    settle(run, RunStopped)
    if acc.num_processes > 1:
        from accelerate.utils import gather_object

        merged: dict[int, tuple[list[float], list[str]]] = {}
        for part in gather_object([scores]):
            merged.update(part)
        scores = merged
    run.sampler.refresh(scores)


def guarded(run: Run, *phases):
    """The step's phases (build, roll out, score), each turning an exception into a held stop when more than
    one process runs: this process then does no more work, and every process stops together at ``settle``
    instead of the others waiting at a collective for this one. Alone, an exception propagates as it is."""
    if run.accelerator.num_processes == 1:
        return phases

    def guard(fn):
        def wrapped(run, *args):
            try:
                return fn(run, *args)
            except Exception as exc:  # noqa: BLE001 - held, then raised on every process by settle
                hold(run, exc)
                return _nothing(fn, run, *args)
        return wrapped

    return tuple(guard(fn) for fn in phases)


def _nothing(fn, run: Run, *args):
    """What a failed phase hands on: no prompts / no trajectories / NaN rewards (a held stop follows)."""
    if fn is score:
        drawn, trajectories = args
        by_slot = {d.slot: d.prompt.sample for d in drawn}
        return [by_slot[t.group_id] for t in trajectories], _nan_rewards(run, len(trajectories))
    return None if fn is prompt_of else []


def _nan_rewards(run: Run, n: int):
    """Rewards of ``n`` rows that were not scored (a stop is held: they never reach an update)."""
    from mmreason.rewarding import RewardBatch

    k = len(run.rewards.names)
    return RewardBatch(torch.full((n, k), float("nan")), list(run.rewards.names), torch.ones(k))


def _state(run: Run) -> dict[str, Any]:
    state = {"sampler": run.sampler.state_dict(), "counters": run.counters.as_dict(),
             "prev_entropy": run.prev_entropy}
    if run.augmenter is not None:
        state["augment"] = run.augmenter.state_dict()
    return copy.deepcopy(state)


def _save(run: Run, step: int, state: dict[str, Any] | None = None):
    from mmreason.train.augment import with_every_rank

    state = with_every_rank(run.accelerator, state if state is not None else _state(run))
    return save_checkpoint(run.accelerator, run.cfg.output_dir, step, run.model, run.optimizer, run.scheduler,
                           state, processor=run.processor, keep=run.cfg.save_total_limit)


def train(cfg: TrainConfig, config_dir: str | None = None) -> Run:
    """The whole run; returns the Run (for tests and notebooks)."""
    from mmreason.rewarding import RewardErrorLimitExceeded

    check_algorithm_options(cfg, config_dir)
    check_backend_config(cfg)
    run = setup_run(cfg, config_dir=config_dir)
    check_estimator_needs(run)
    start = 0
    resumed = resume(cfg.resume, cfg.output_dir, run.accelerator, run.model, run.optimizer, run.scheduler)
    if resumed is not None:
        ckpt, state = resumed
        run.sampler.load_state_dict(state["sampler"])
        run.counters.__dict__.update(state.get("counters", {}))
        run.prev_entropy = float(state.get("prev_entropy", 0.0))
        if run.augmenter is not None:
            from mmreason.train.augment import own_state

            mine = own_state(state, run.accelerator.process_index)
            if mine is not None:
                run.augmenter.load_state_dict(mine)
        start = int(state["step"])
        if run.accelerator.is_main_process:
            print(f"resumed from {ckpt} at step {start}")
    run.logger = RunLogger(cfg.output_dir, run.accelerator, cfg.max_steps, start, cfg.report_to,
                           config=_config_dict(cfg))
    run.rollout_backend = make_backend(run)
    if start:
        sync_weights(run)  # a resumed run's engine starts from the checkpoint's weights
    evaluator = _evaluator(run)
    health = _health(run, start)
    try:
        if evaluator is not None and start == 0:
            first = evaluator(run, 0)
            health.check(0, first)
            run.logger.step(0, first, advance=False)  # where the eval curve starts
        before = _state(run)
        for step in range(start + 1, cfg.max_steps + 1):
            run.step = step
            before = _state(run)  # a fault inside this step saves step - 1 with this: resume replays the step
            refresh_sampler(run, step)
            metrics = train_step(run, step)
            if evaluator is not None and step % cfg.eval_steps == 0:
                metrics.update(evaluator(run, step))
            metrics.update(health.check(step, metrics))  # the alarms over the rows so far (mmreason.health)
            if step % max(cfg.logging_steps, 1) == 0 or step == cfg.max_steps:
                run.logger.step(step, metrics)
            if cfg.save_steps and step % cfg.save_steps == 0:
                _save(run, step)
        if not cfg.save_steps or cfg.max_steps % cfg.save_steps:
            _save(run, cfg.max_steps)
    except (RunStopped, RewardErrorLimitExceeded, EngineDied) as exc:
        # Faults stop a step before its update: the weights are those after step - 1.
        path = _save(run, run.step - 1, before)
        raise RunStopped(f"run stopped at step {run.step}: {exc}; last checkpoint: {path} (the last finished "
                         "step; resume replays this one)") from exc
    finally:
        close_backend(run)
        run.logger.close()
    if run.accelerator.is_main_process:
        from mmreason.train.plot import plot_run

        print(f"curves: {plot_run(cfg.output_dir)}")
    return run


def _config_dict(cfg: TrainConfig) -> dict:
    from mmreason.config import to_dict

    return to_dict(cfg)


def _health(run: Run, start: int):
    """The run's alarm monitor; a resumed run replays the rows it logged before."""
    from mmreason.health.monitor import HealthMonitor
    from mmreason.train.logging import read_metrics

    rows = []
    if start and (Path(run.cfg.output_dir) / "metrics.jsonl").exists():
        rows = [r for r in read_metrics(run.cfg.output_dir) if r.get("step", 0) <= start]
    main = run.accelerator.is_main_process  # every process sees the same reduced metrics: one speaks
    return HealthMonitor(run.cfg.health, run.event if main else (lambda *a, **k: None), run.logger.say, rows)


def _evaluator(run: Run):
    if run.cfg.eval_steps is None:
        run.cfg.eval_steps = auto_eval_steps(run)
    if not run.cfg.eval_steps:
        return None
    from mmreason.eval.in_training import evaluate_during_training

    return evaluate_during_training


def auto_eval_steps(run: Run) -> int:
    """``eval_steps`` left unset: the reward-hacking alarm's period when that alarm is on, the run is at least
    its window long and the task pack has an eval split; else 0 (no in-training eval)."""
    h = run.cfg.health
    if not (h.enabled and h.reward_hacking.enabled and run.cfg.max_steps >= h.reward_hacking.window):
        return 0
    from mmreason.eval.in_training import has_eval_split

    if run.cfg.eval_limit is None:  # the split is loaded (and cached) at the size the evals will use
        run.cfg.eval_limit = h.reward_hacking.eval_limit
    if not has_eval_split(run.cfg, run.processor.tokenizer):
        run.event("no_eval_split", reason=f"task {run.cfg.data.task!r}: no eval split; the reward-hacking alarm "
                  "has no held-out metric to read")
        return 0
    return h.reward_hacking.eval_steps
