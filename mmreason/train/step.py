"""One GRPO-family training step, read top to bottom as the flow, one timed block per phase (``time/<phase>``):

    1. draw      the step's prompts (``sample_prompts``), built as model inputs (``build_prompts``)
    2. roll out  G completions per prompt (``roll_out``: HF ``generate``, a vLLM engine, or episodes)
    3. score     rewards [N, K] (``score``)
       (steps 1-3 are one round, ``draw_round``; a within-step method may redo groups of it, ``regenerate``;
       DAPO dynamic sampling draws further rounds, ``dynamic_sampling``; together: ``get_rollouts``)
    4. advantages [N] from the step's table (``compute_advantages``), fed back to the sampler
    5. update    num_iterations passes of mini-batch updates, one optimizer step each share (``update.py``),
                 then the new weights pushed to the rollout engine

Build, roll out and score run under one fault guard (``faults.fault_guard``); a fault on any process stops every
process at the step's agreement point. The run around the steps (resume, eval, checkpoints, stops) is
``loop.py``. Estimators, losses, aggregations and KL estimators are looked up by name in ``mmreason.rl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from mmreason import rl
from mmreason.parallel.agree import any_rank, settle
from mmreason.parallel.sharding import gathered
from mmreason.rollout.backends import EngineDiedAfterUpdate
from mmreason.rollout.episode_stats import tool_stats
from mmreason.rollout.multiturn import (
    ended_by_limit,
)
from mmreason.sampling import WITHIN_STEP
from mmreason.sampling.records import Drawn, Rollouts
from mmreason.sampling.within_step import StepPhases
from mmreason.train.collect import keep_groups, signal_groups
from mmreason.train.config import accepted_options
from mmreason.train.faults import RunStopped, fault_guard, nothing_usable
from mmreason.train.metrics import completion_rows, rollout_metrics
from mmreason.train.prompts import prompt_of
from mmreason.train.records import task_index, task_names
from mmreason.train.rollout_backend import rest_engine, sync_weights
from mmreason.train.rollout_gather import rollouts_run_policy
from mmreason.train.rounds import (  # noqa: F401 - the phases, also read here by their old names
    NonFiniteModelError,
    draw_round,
    group_sizes,
    nan_rewards,
    roll_out,
    sample_prompts,
    samples_of,
    score,
)
from mmreason.train.setup import Run
from mmreason.train.table import StepTable, build_table
from mmreason.train.timing import PhaseTimes
from mmreason.train.update import policy_update
from mmreason.types import Sample, Trajectory

if TYPE_CHECKING:
    from mmreason.rewarding import RewardBatch
    from mmreason.rollout.prompts import PromptInputs

PHASES = ("prompts", "generate", "reward", "advantages", "update")  # time/<phase> of every step


def train_step(run: Run, step: int) -> dict[str, Any]:
    """Run one step: draw -> roll out -> score (``get_rollouts``) -> advantages -> update; its metrics."""
    timed, decoded = PhaseTimes(), run.media_time.video_decode
    got = get_rollouts(run, step, timed)
    if not any_rank(run.accelerator, bool(got.trajectories)):  # no process has a sample to train on
        raise nothing_usable(run, step)
    metrics: dict[str, Any] = {**got.metrics, **rollout_costs(got.trajectories, run.media_time.video_decode - decoded)}
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
            metrics.update(update(run, table))
        metrics.update(rollout_metrics(run, table))
        if run.cfg.log_completions_steps and step % run.cfg.log_completions_steps == 0 and run.logger:
            run.logger.completions(step, completion_rows(table))
    metrics.update(timed.metrics(PHASES))
    metrics["lr"] = run.scheduler.get_last_lr()[0]
    metrics.update({f"count/{k}": v for k, v in run.counters.as_dict().items()})
    return metrics


def get_rollouts(run: Run, step: int, timed: PhaseTimes) -> Rollouts:
    """Get the step's scored groups: one round drawn, rolled out and scored, redone in part by the within-step method
    that is on, with DAPO's further rounds when on. A fault on any process stops every process here."""
    # a sharded model generates whole (mmreason.parallel); not gathered at all when a vLLM engine generates
    with gathered(run.accelerator.unwrap_model(run.model), whole=rollouts_run_policy(run)):
        if run.async_rollouts is None:  # draw -> roll out -> score, now
            got = draw_round(run, step, timed, sample_prompts(run))
        # rollout.async_generation: the round generated during the last update (async_rollouts.py)
        else:
            got = run.async_rollouts.take(step, timed)
        got = regenerate(run, step, timed, got)  # refinement, hints, anchors or augmentation, when on
        got = dynamic_sampling(run, step, timed, got)  # DAPO: further rounds until the groups carry signal
    settle(run, RunStopped)
    return got


def update(run: Run, table: StepTable) -> dict[str, float]:
    """Run the policy update (``update.py``), then push the new weights to the rollout engine, which samples the next
    step with them. The step's state is complete before the push, so an engine that dies taking it leaves a step that is
    logged, then saved as itself (``run.engine_fault``, raised by the loop). With ``rollout.vllm_enable_sleep_mode`` the
    engine sleeps through the update (``rest_engine``)."""
    rest_engine(run)
    metrics = policy_update(run, table)
    try:
        metrics.update(sync_weights(run))
    except EngineDiedAfterUpdate as exc:
        run.engine_fault = exc
    return metrics


def within_step_method(run: Run, first_round: bool = True) -> str | None:
    """Return the within-step method the config names (``within_step.name``): iGRPO refinement, SAGE hints, R³ / DaGRPO
    anchors or, on a step's first round only, difficulty-aware augmentation; None when none is on. Its code is
    ``WITHIN_STEP.get(name)`` (mmreason/sampling/)."""
    name = run.cfg.within_step.name
    return None if name == "augment" and (not first_round or run.augmenter is None) else name


def regenerate(run: Run, step: int, timed: PhaseTimes, got: Rollouts, first_round: bool = True) -> Rollouts:
    """Redo the round's groups with the within-step method that is on (``within_step_method``): its rebuilt prompts go
    through this step's phases (timed as theirs), under the fault guard."""
    name = within_step_method(run, first_round)
    if name is None or not got.trajectories:
        return got

    def timed_prompt_of(run: Run, sample: Sample) -> PromptInputs | None:
        with timed("prompts"):
            return prompt_of(run, sample)

    def timed_roll_out(run: Run, drawn: list[Drawn], step: int) -> list[Trajectory]:
        with timed("generate"):
            return roll_out(run, drawn, step)

    def timed_score(run: Run, drawn: list[Drawn], trajectories: list[Trajectory]) -> tuple[list[Sample], RewardBatch]:
        with timed("reward"):
            return score(run, drawn, trajectories)

    out = got
    with fault_guard(run):
        out = WITHIN_STEP.get(name).regenerate(
            StepPhases(run, step, prompt_of=timed_prompt_of, roll_out=timed_roll_out, score=timed_score), got
        )
    return out


def dynamic_sampling(run: Run, step: int, timed: PhaseTimes, first: Rollouts) -> Rollouts:
    """Run DAPO dynamic sampling (collect.py; off without ``algorithm.dynamic_sampling``). Further rounds of the same
    phases run until ``prompts_per_step`` groups carry signal or ``dynamic_sampling_max_draws`` extra draws were made.
    Then ``prompts_per_step`` groups are kept and the rest counted as dropped."""
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
    """Report the step's ``decoded`` seconds of video decoding (part of time/prompts) and, for episodes, environment
    seconds (part of time/generate) and the episodes a limit cut before the model could finish."""
    out = {"time/video_decode": decoded}
    if any(t.env_seconds is not None for t in trajectories):
        out["time/environment"] = sum(t.env_seconds or 0.0 for t in trajectories)
        out["episodes/cut"] = sum(ended_by_limit(t) for t in trajectories)  # an observation over the limit
        out["episodes/cut_share"] = out["episodes/cut"] / len(trajectories)
        out.update(tool_stats(trajectories))  # env/tool_calls, env/bad_tool_calls, ...
    return out


def step_table(run: Run, got: Rollouts) -> StepTable:
    """Build the step's table: rewards, total under ``reward_missing``, groups, tasks (``algorithm.task_key``)."""
    tasks = task_names(got.samples, run.cfg.algorithm.task_key or run.pack.task_key, run.pack.name)
    return build_table(
        got.trajectories,
        got.samples,
        got.batch,
        got.batch.total(run.cfg.reward_missing),
        {d.slot: d.index for d in got.prompts},
        tasks=tasks,
        task_ids=task_index(tasks),
    )


def compute_advantages(run: Run, table: StepTable) -> tuple[torch.Tensor, torch.Tensor]:
    """Compute advantages [N] and the keep mask [N] (estimator loss mask x dynamic-sampling filter), from the table.

    The estimator gets ``algorithm.estimator_options``, the columns it declared (``needs``) from the table,
    and ``reward_missing`` as its ``missing`` option (checked at start-up by ``check_algorithm_options``)."""
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


def observe_sampler(run: Run, drawn: list[Drawn], trajectories: list[Trajectory], total: torch.Tensor) -> None:
    """Give adaptive samplers their training feedback: per-trajectory rewards keyed by dataset index."""
    index_of = {d.slot: d.index for d in drawn}
    indices = torch.tensor([index_of[t.group_id] for t in trajectories])  # [N]
    completions = [t.completion_text for t in trajectories]
    run.sampler.observe([d.index for d in drawn], total, indices, completions=completions)
