"""The GRPO-family training loop. ``train_step`` reads as the flow, one timed block per phase:

    build prompts -> roll out G completions each -> rewards -> advantages
    -> num_iterations passes of mini-batch updates (policy loss + KL) -> optimizer step

Prompt loading is in ``prompts.py`` (shared with SFT), the policy update in ``update.py``, the step's metrics in
``metrics.py``; build, roll out and score run under one fault guard (``faults.fault_guard``), and DAPO dynamic
sampling (``dynamic_sampling``) runs them again. The loop owns no task-specific code. Estimators, losses,
aggregations and KL estimators are looked up by name in ``mmreason.rl``'s registries.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import torch

from mmreason.parallel.agree import any_rank, hold, settle, stopping
from mmreason.parallel.sharding import gathered
from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.backends import EngineDied, EngineDiedAfterUpdate
from mmreason.rollout.generate import GenerationSettings, generate_groups, group_seed
from mmreason.rollout.multiturn import (
    EnvironmentStartError,
    EpisodeStart,
    ended_by_fault,
    ended_by_limit,
    episode_context,
    run_episodes,
)
from mmreason.rollout.prompts import MEDIA_SECONDS
from mmreason.rollout.row_sampling import NonFiniteLogitsError
from mmreason.train.anchors import anchor_groups
from mmreason.train.async_rollouts import rollouts_for_step
from mmreason.train.augment import augment_groups
from mmreason.train.checkpoint import resume, save_checkpoint
from mmreason.train.collect import Rollouts, keep_groups, no_rewards, signal_groups
from mmreason.train.config import TrainConfig, accepted_options, check_algorithm_options
from mmreason.train.faults import RunStopped, bad_sample, fault_guard
from mmreason.train.hinting import hint_groups
from mmreason.train.logging import RunLogger
from mmreason.train.metrics import completion_rows, rollout_metrics
from mmreason.train.prompts import build_prompts, prompt_of, unseen_media
from mmreason.train.records import Drawn, task_index, task_names
from mmreason.train.refine import refine_groups
from mmreason.train.rollout_backend import (
    check_backend_config,
    close_backend,
    make_backend,
    push_at_start,
    sync_weights,
)
from mmreason.train.setup import Run, setup_run
from mmreason.train.table import StepTable, build_table, check_needs
from mmreason.train.timing import PhaseTimes
from mmreason.train.update import policy_update
from mmreason.types import Sample, Trajectory

PHASES = ("prompts", "generate", "reward", "advantages", "update")  # time/<phase> of every step


def train_step(run: Run, step: int) -> dict[str, Any]:
    """One step: build -> roll out -> score (more rounds of the same under dynamic sampling) -> advantages ->
    update, each phase timed as ``time/<phase>``."""
    timed, decoded = PhaseTimes(), MEDIA_SECONDS["video_decode"]
    with gathered(run.accelerator.unwrap_model(run.model)):  # a sharded model generates whole (mmreason.parallel)
        # ASYNC HOOK (train/async_rollouts.py): build -> roll out -> score, or with rollout.async_generation the
        # rollouts the producer generated while the previous update ran
        got = rollouts_for_step(run, step, timed)
        got = regenerate(run, step, timed, got)  # refinement, hints or augmentation of the groups, when on
        got = dynamic_sampling(run, step, timed, got)  # DAPO: further rounds until the groups carry signal, when on
    settle(run, RunStopped)  # a fault on any process stops every process here
    metrics: dict[str, Any] = {**got.metrics, **rollout_costs(got.trajectories, decoded)}
    if any_rank(run.accelerator, not got.trajectories):  # every process skips when one has nothing to train on
        if got.trajectories:
            run.event("update_skipped", step=step, reason="another process has no trajectories this step")
        metrics["skipped_update"] = 1.0
    else:
        with timed("advantages"):
            table = step_table(run, got)
            table.advantages, table.keep = compute_advantages(run, table)
            observe_sampler(run, got.prompts, got.trajectories, table.total)
        with timed("update"):
            metrics.update(policy_update(run, table))
            if "entropy" in metrics:
                run.prev_entropy = float(metrics["entropy"])  # the next step's losses that take it (DCPO)
            # the engine samples the next step with the updated policy; the step's state is complete before
            # the push, so an engine that dies taking it leaves a step that is logged, then saved as itself
            try:
                metrics.update(sync_weights(run))
            except EngineDiedAfterUpdate as exc:
                run.engine_fault = exc  # raised by ``train`` once the step's row is logged
        metrics.update(rollout_metrics(run, table))
        if run.cfg.log_completions_steps and step % run.cfg.log_completions_steps == 0 and run.logger:
            run.logger.completions(step, completion_rows(table))
    metrics.update(timed.metrics(PHASES))
    metrics["lr"] = run.scheduler.get_last_lr()[0]
    metrics.update({f"count/{k}": v for k, v in run.counters.as_dict().items()})
    return metrics


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


def within_step_pass(run: Run, first_round: bool = True):
    """The within-step regeneration the config turns on (at most one; ``TrainConfig.validate``): iGRPO refinement
    (refine.py), SAGE hints (hinting.py), R³ / DaGRPO anchors (anchors.py) or, on a step's first round only, difficulty-aware augmentation
    (augment.py); None when none is on."""
    if run.cfg.refine.enabled:
        return refine_groups
    if run.cfg.hint.enabled:
        return hint_groups
    if run.cfg.anchor.enabled:
        return anchor_groups
    return augment_groups if first_round and run.augmenter is not None else None


def regenerate(run: Run, step: int, timed: PhaseTimes, got: Rollouts, first_round: bool = True) -> Rollouts:
    """The round's groups regenerated by the within-step pass that is on (``within_step_pass``): rebuilt
    prompts rolled out and scored by the same phases (timed as theirs), under the fault guard."""
    regen = within_step_pass(run, first_round)
    if regen is None or not got.trajectories:
        return got

    def build_one(run, sample):
        with timed("prompts"):
            return prompt_of(run, sample)

    def generate(run, prompts, step):
        with timed("generate"):
            return roll_out(run, prompts, step)

    def rewards(run, prompts, trajectories):
        with timed("reward"):
            return score(run, prompts, trajectories)

    out = got
    with fault_guard(run):
        prompts, trajectories, samples, batch, metrics = regen(
            run, step, got.prompts, got.trajectories, got.samples, got.batch, build_one, generate, rewards
        )
        out = Rollouts(prompts, trajectories, samples, batch, metrics=metrics)
    return out


def dynamic_sampling(run: Run, step: int, timed: PhaseTimes, first: Rollouts) -> Rollouts:
    """DAPO dynamic sampling (collect.py; off without ``algorithm.dynamic_sampling``): further rounds of the same
    phases until ``prompts_per_step`` groups carry signal or ``dynamic_sampling_max_draws`` extra draws were
    made, then ``prompts_per_step`` groups kept and the rest counted as dropped."""
    cfg = run.cfg
    if not cfg.algorithm.dynamic_sampling:
        return first
    if not first.trajectories:
        first.metrics["dynamic_sampling/extra_draws"] = 0.0
        return first
    rounds, extra = [first], 0
    while extra < cfg.algorithm.dynamic_sampling_max_draws and any_rank(
        run.accelerator, signal_groups(rounds, cfg.reward_missing) < cfg.prompts_per_step
    ):
        extra += 1
        offset = extra * cfg.prompts_per_step * run.accelerator.num_processes  # slots stay unique: new seeds
        more = draw_round(run, step, timed, [(slot + offset, index) for slot, index in sample_prompts(run)])
        more = regenerate(run, step, timed, more, first_round=False)  # refinement or hints, when on
        if more.trajectories:
            rounds.append(more)
    got = keep_groups(rounds, cfg.prompts_per_step, cfg.reward_missing, extra)
    got.metrics = {**first.metrics, "dynamic_sampling/extra_draws": float(extra)}
    run.counters.dropped_groups += got.discarded_groups
    return got


def rollout_costs(trajectories: list[Trajectory], decoded: float) -> dict[str, float]:
    """Video decoding since ``decoded`` (part of time/prompts) and, for episodes, environment seconds (part of
    time/generate) and the episodes a limit cut before the model could finish."""
    out = {"time/video_decode": MEDIA_SECONDS["video_decode"] - decoded}
    if any("env_seconds" in t.reward_info for t in trajectories):
        out["time/environment"] = sum(t.reward_info.get("env_seconds", 0.0) for t in trajectories)
        out["episodes/cut"] = sum(ended_by_limit(t) for t in trajectories)  # an observation over the limit
        out["episodes/cut_share"] = out["episodes/cut"] / len(trajectories)
    return out


def step_table(run: Run, got: Rollouts) -> StepTable:
    """The step's table: rewards, total under ``reward_missing``, groups, tasks (``algorithm.task_key``)."""
    tasks = task_names(got.samples, run.cfg.algorithm.task_key or run.pack.task_key, run.pack.name)
    return build_table(
        got.trajectories,
        got.samples,
        got.batch,
        got.batch.total(run.cfg.reward_missing),
        {d.slot: d.index for d in got.prompts},
        tasks,
        task_index(tasks),
    )


# ---- the phases -------------------------------------------------------------------------------------


def sample_prompts(run: Run) -> list[tuple[int, int]]:
    """(slot, dataset index) of this process's slice; every process draws the same global batch."""
    acc, n = run.accelerator, run.cfg.prompts_per_step
    global_indices = run.sampler.next_indices(n * acc.num_processes)
    start = acc.process_index * n
    return list(enumerate(global_indices[start : start + n], start=start))


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
                lambda part=part, size=size: generate_groups(
                    model,
                    run.processor,
                    [d.prompt for d in part],
                    [d.slot for d in part],
                    size,
                    settings,
                    [group_seed(run.cfg.seed, step, d.key) for d in part],
                    with_logprobs=r.hf_sampler_logprobs,
                ),
            )
        order = {d.slot: k for k, d in enumerate(drawn)}
        trajectories.sort(key=lambda t: order[t.group_id])  # stable: each group's rows keep their order
    model.train()
    return trajectories


def group_sizes(run: Run, drawn: list[Drawn]) -> list[tuple[int, list[Drawn]]]:
    """(rollouts per prompt, the prompts) in order of first size: ``rollout.num_generations`` for every prompt,
    unless the sampler sizes the groups (``generations``: Rollout-GDRO), then one part per size."""
    n = run.cfg.rollout.num_generations
    sizing = getattr(run.sampler, "generations", None)
    counts = sizing([d.index for d in drawn], n) if sizing is not None and drawn else None
    if counts is None:
        return [(n, drawn)] if drawn else []
    parts: dict[int, list[Drawn]] = {}
    for d, c in zip(drawn, counts):
        parts.setdefault(int(c), []).append(d)
    return list(parts.items())


class NonFiniteModelError(RuntimeError):
    """The policy's logits are not finite: the run stops (no checkpoint of such weights is written)."""


def _sampled(step: int, generate):
    """``generate()``, with non-finite logits turned into a stop that names the step."""
    try:
        return generate()
    except NonFiniteLogitsError as exc:
        raise NonFiniteModelError(
            f"step {step}: {exc}; the policy's weights are not finite (check "
            "model.name_or_path or the checkpoint resumed from)"
        ) from None


def _play_episodes(run: Run, model, drawn: list[Drawn], settings: GenerationSettings, step: int) -> list[Trajectory]:
    """G episodes per prompt, all played together (one generate call per turn). A sample whose environment
    cannot start is left out of the step, like one that won't load; an environment error ends one episode."""
    r = run.cfg.rollout
    starts = [
        EpisodeStart(d.prompt, run.pack.make_environment(), d.slot, i, d.key)
        for d in drawn
        for i in range(r.num_generations)
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
        r.max_turns,
        max_context,
        run.cfg.seed,
        step,
        r.max_observation_tokens,
        r.env_step_timeout_s,
        with_logprobs=run.rollout_backend is None and r.hf_sampler_logprobs,
    )
    trajectories = []
    for k, d in enumerate(drawn):
        group = results[k * r.num_generations : (k + 1) * r.num_generations]
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

    samples = samples_of(drawn, trajectories)
    try:
        batch = run.rewards(samples, trajectories)
    except RewardErrorLimitExceeded as exc:
        hold(run, exc)
        batch = nan_rewards(run, len(trajectories))
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


def check_group_sizing(run: Run) -> None:
    """Start-up: a sampler that sizes the groups (Rollout-GDRO) needs HF single-turn generation on one process."""
    from mmreason.config import ConfigError

    if not getattr(run.sampler, "rollout_allocation", False):
        return
    cfg = run.cfg
    why = (
        "rollout.backend=vllm"
        if cfg.rollout.backend != "hf"
        else "episodes (rollout.max_turns > 1)"
        if run.pack.make_environment is not None and cfg.rollout.max_turns > 1
        else f"{run.accelerator.num_processes} processes"
        if run.accelerator.num_processes > 1
        else None
    )
    if why is not None:
        raise ConfigError(
            f"sampler.options.rollout_allocation: groups of different sizes are generated with HF "
            f"single-turn generation on one process; this run has {why}"
        )


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
    with gathered(acc.unwrap_model(run.model)):
        for start in range(0, len(mine), n):
            got = draw_round(run, step, PhaseTimes(), list(enumerate(mine[start : start + n])))
            index_of = {d.slot: d.index for d in got.prompts}
            for t, reward in zip(got.trajectories, got.batch.total(run.cfg.reward_missing).tolist()):
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


def samples_of(drawn: list[Drawn], trajectories: list[Trajectory]) -> list[Sample]:
    """The sample of each trajectory (by its group's slot)."""
    by_slot = {d.slot: d.prompt.sample for d in drawn}
    return [by_slot[t.group_id] for t in trajectories]


def nan_rewards(run: Run, n: int) -> RewardBatch:
    """Rewards of ``n`` rows that were not scored (a stop is held: they never reach an update)."""
    k = len(run.rewards.names)
    return RewardBatch(torch.full((n, k), float("nan")), list(run.rewards.names), torch.ones(k))


def _state(run: Run) -> dict[str, Any]:
    state = {
        "sampler": run.sampler.state_dict(),
        "counters": run.counters.as_dict(),
        "prev_entropy": run.prev_entropy,
        "entropy_history": list(run.entropy_history),
    }
    if run.augmenter is not None:
        state["augment"] = run.augmenter.state_dict()
    return copy.deepcopy(state)


def _save(run: Run, step: int, state: dict[str, Any] | None = None):
    from mmreason.train.augment import with_every_rank

    state = with_every_rank(run.accelerator, state if state is not None else _state(run))
    return save_checkpoint(
        run.accelerator,
        run.cfg.output_dir,
        step,
        run.model,
        run.optimizer,
        run.scheduler,
        state,
        processor=run.processor,
        keep=run.cfg.save_total_limit,
        run_id=run.run_id,
    )


def train(cfg: TrainConfig, config_dir: str | None = None) -> Run:
    """The whole run; returns the Run (for tests and notebooks). The run owns ``output_dir`` while it runs
    (``mmreason.rundir``: locked, and refused when it holds anything but a run to resume)."""
    check_algorithm_options(cfg, config_dir)
    check_backend_config(cfg)
    run = setup_run(cfg, config_dir=config_dir, own_output_dir=True)
    try:
        return _train(run, cfg)
    finally:
        run.release()


def _train(run: Run, cfg: TrainConfig) -> Run:
    from mmreason.rewarding import RewardErrorLimitExceeded

    check_estimator_needs(run)
    check_group_sizing(run)
    start, ckpt, eval_pending = 0, None, False
    resumed = resume(
        cfg.resume,
        cfg.output_dir,
        run.accelerator,
        run.model,
        run.optimizer,
        run.scheduler,
        check_state=lambda state: check_loop_state(run, state),
    )
    if resumed is not None:
        ckpt, state = resumed
        run.adopt(state)  # its run id: rotation goes on over the checkpoints of the run it continues
        run.sampler.load_state_dict(state["sampler"])
        run.counters.__dict__.update(state.get("counters", {}))
        run.prev_entropy = float(state.get("prev_entropy", 0.0))
        run.entropy_history = [float(v) for v in state.get("entropy_history", [])]
        if run.augmenter is not None:
            from mmreason.train.augment import own_state

            mine = own_state(state, run.accelerator.process_index)
            if mine is not None:
                run.augmenter.load_state_dict(mine)
        start = int(state["step"])
        eval_pending = state.get("eval_pending") == start
        if run.accelerator.is_main_process:
            print(f"resumed from {ckpt} at step {start}")
    run.logger = RunLogger(
        cfg.output_dir, run.accelerator, cfg.max_steps, start, cfg.report_to, config=_config_dict(cfg)
    )
    run.rollout_backend = make_backend(run)
    evaluator = _evaluator(run)
    health = _health(run, start)
    run.step = start
    before = _state(run)
    try:
        if push_at_start(cfg, resumed is not None):
            sync_weights(run, after_update=False)  # the engine starts from the checkpoint's (the policy's) weights
        if evaluator is not None and (start == 0 or eval_pending):
            # step 0: where the eval curve starts; a resumed step whose eval a failed weight push skipped: now
            first = evaluator(run, start)
            health.check(start, first)
            run.logger.step(start, first, advance=False)
        for step in range(start + 1, cfg.max_steps + 1):
            run.step = step
            before = _state(run)  # a fault inside this step saves step - 1 with this: resume replays the step
            refresh_sampler(run, step)
            metrics = train_step(run, step)
            fault, run.engine_fault = run.engine_fault, None  # the engine died taking this step's weights
            if evaluator is not None and step % cfg.eval_steps == 0 and fault is None:
                metrics.update(evaluator(run, step))
            metrics.update(health.check(step, metrics))  # the alarms over the rows so far (mmreason.health)
            if step % max(cfg.logging_steps, 1) == 0 or step == cfg.max_steps or fault is not None:
                run.logger.step(step, metrics)
            if fault is not None:
                raise fault
            if cfg.save_steps and step % cfg.save_steps == 0:
                _save(run, step)
        if not cfg.save_steps or cfg.max_steps % cfg.save_steps:
            _save(run, cfg.max_steps)
    except (RunStopped, RewardErrorLimitExceeded, EngineDied) as exc:
        raise _stopped(run, exc, start, before, ckpt) from exc
    finally:
        close_backend(run)
        run.logger.close()
    if run.accelerator.is_main_process:
        from mmreason.train.plot import plot_run

        print(f"curves: {plot_run(cfg.output_dir)}")
    return run


def check_loop_state(run: Run, state: dict[str, Any]) -> None:
    """The parts of a trainer state the loop restores itself (sampler, counters, entropy, every process's
    augmentation state), tried on copies: resume finds a state it cannot take before any part is applied."""
    from mmreason.train.augment import own_state

    copy.deepcopy(run.sampler).load_state_dict(state["sampler"])
    if not isinstance(state.get("counters", {}), dict):
        raise ValueError("counters is not an object")
    float(state.get("prev_entropy", 0.0))
    if run.augmenter is not None:
        for rank in range(run.accelerator.num_processes):  # all of them: every process decides alike
            mine = own_state(state, rank)
            if mine is not None:
                copy.deepcopy(run.augmenter).load_state_dict(mine)


def _stopped(run: Run, exc: BaseException, start: int, before: dict[str, Any], resumed_from) -> RunStopped:
    """Save the last finished step and say how to go on. A fault inside a step comes before its update: the
    weights are those after step - 1, saved with the state from before the step (resume replays the step). An
    engine that dies taking a step's weights (``EngineDiedAfterUpdate``) comes after the update: the step is
    finished, and is saved as itself with its state, never under step - 1's number (resume continues with the
    next step and pushes the checkpoint's weights to a new engine). A fault before any step saves nothing."""
    step = run.step
    if isinstance(exc, EngineDiedAfterUpdate):
        state = _state(run)
        if run.cfg.eval_steps and step % run.cfg.eval_steps == 0:
            state["eval_pending"] = step  # the push failed before this step's eval: resume runs it first
        path = _save(run, step, state)
        return RunStopped(
            f"run stopped after step {step}'s update: {exc}; last checkpoint: {path} (step {step}, "
            f"finished; resume=auto continues with step {step + 1})"
        )
    if step > start:
        path = _save(run, step - 1, before)
        return RunStopped(
            f"run stopped at step {step}: {exc}; last checkpoint: {path} (the last finished "
            "step; resume=auto replays this one)"
        )
    return RunStopped(
        f"run stopped before step {start + 1}: {exc}; last checkpoint: {resumed_from} "
        "(nothing ran since; resume=auto starts from it)"
    )


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
        run.event(
            "no_eval_split",
            reason=f"task {run.cfg.data.task!r}: no eval split; the reward-hacking alarm "
            "has no held-out metric to read",
        )
        return 0
    return h.reward_hacking.eval_steps
