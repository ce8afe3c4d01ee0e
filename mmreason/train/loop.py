"""The one run loop of `mmreason train` (GRPO) and `mmreason sft`, around a ``Method``'s step:

    resume      the newest checkpoint that reads whole (``resume=``): weights, optimizer, RNG, and ``load_state``
    start       GRPO: the rollout engine, given the checkpoint's weights; the in-training eval at step 0
    each step   the method's step -> in-training eval every ``eval_steps`` -> health alarms -> log -> save
    end         the last step saved (unless ``save_steps`` just did)
    a stop      a fault limit passed, a reward error limit, a dead engine (every process together, at the step's
                agreement point): the last finished step saved, and one line saying how to go on
    a signal    SIGTERM: the step in progress finished, then the same (``signals.py``); a second one: at once

What a checkpoint holds beside the weights is ``state(run)``, and ``load_state`` is its mirror (both here, with
``check_state``, the trial on copies that lets resume refuse a state before any part of it is applied).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import accelerate.utils

from mmreason.config import to_dict
from mmreason.eval.in_training import evaluate_during_training, has_eval_split
from mmreason.health.monitor import HealthMonitor
from mmreason.parallel.agree import any_rank
from mmreason.paths import checkpoints
from mmreason.rewarding import RewardErrorLimitExceeded
from mmreason.rollout.backends import EngineDied, EngineDiedAfterUpdate
from mmreason.train.async_rollouts import start_async_rollouts
from mmreason.train.checkpoint import resume, save_checkpoint
from mmreason.train.faults import RunStopped
from mmreason.train.logging import RunLogger, read_metrics
from mmreason.train.rollout_backend import close_backend, make_backend, push_at_start, sync_weights
from mmreason.train.setup import Run
from mmreason.train.signals import Interrupted, StopRequest

if TYPE_CHECKING:
    from accelerate import Accelerator

STOPS = (RunStopped, RewardErrorLimitExceeded, EngineDied)  # what stops a run with a checkpoint first


@dataclass(frozen=True)
class Method:
    """What GRPO or SFT gives the loop: its step (one step's metrics), how many steps, and whether the run samples
    its policy (GRPO: a rollout engine when ``rollout.backend`` asks for one, the in-training eval and the health
    alarms over its rewards)."""

    step: Callable[[Run, int], dict[str, Any]]
    total_steps: int
    samples_policy: bool = False


@dataclass(frozen=True)
class InTrainingEval:
    """When the harness scores the eval split during the run, derived once from the validated config (which is
    never written to): every ``steps`` steps (0: never) on the first ``limit`` docs (None: all)."""

    steps: int
    limit: int | None


def run_loop(run: Run, method: Method) -> Run:
    """Run the whole run of ``method`` on ``run``'s components; return the Run (for tests and notebooks)."""
    cfg = run.cfg
    start, eval_pending = 0, False
    ckpt: Path | None = None
    resumed = resume(
        cfg.resume,
        cfg.output_dir,
        run.accelerator,
        run.model,
        run.optimizer,
        scheduler=run.scheduler,
        check_state=lambda saved: check_state(run, saved),
    )
    if resumed is not None:
        ckpt, saved = resumed
        load_state(run, saved)
        start = int(saved["step"])
        eval_pending = saved.get("eval_pending") == start
        if run.accelerator.is_main_process:
            print(f"resumed from {ckpt} at step {start}")
    total = method.total_steps
    run.logger = RunLogger(cfg.output_dir, run.accelerator, total, start, cfg.report_to, config=to_dict(cfg))
    evals = in_training_eval(run) if method.samples_policy else InTrainingEval(0, None)
    health = monitor(run, start) if method.samples_policy else None
    run.step = start
    before = state(run)
    signals = StopRequest()
    try:
        # SIGTERM: the step in progress ends, is saved, the run stops (signals.py)
        signals.install()
        if method.samples_policy:
            start_engine(run, start + 1, resumed is not None)
        if evals.steps and (start == 0 or eval_pending):
            # step 0: where the eval curve starts; a resumed step whose eval a failed weight push skipped: now
            first = evaluate(run, start, evals)
            if health is not None:
                health.check(start, first)
            run.logger.step(start, first, advance=False)
        for step in range(start + 1, total + 1):
            if any_rank(run.accelerator, signals.signum is not None):  # every process stops at the same step
                raise interrupted(run, signals, last=step - 1, start=start, resumed_from=ckpt)
            run.step = step
            # a fault inside this step saves step - 1 with this: resume replays the step
            before = state(run)
            metrics = method.step(run, step)
            fault, run.engine_fault = run.engine_fault, None  # the engine died taking this step's weights
            if evals.steps and step % evals.steps == 0 and fault is None:
                metrics.update(evaluate(run, step, evals))
            if health is not None:
                metrics.update(health.check(step, metrics))  # the alarms over the rows so far (mmreason.health)
            if step % max(cfg.logging_steps, 1) == 0 or step == total or fault is not None:
                run.logger.step(step, metrics)
            if fault is not None:
                raise fault
            if cfg.save_steps and step % cfg.save_steps == 0:
                save(run, step)
        if not cfg.save_steps or total % cfg.save_steps:
            save(run, total)
    except Interrupted:
        raise
    except STOPS as exc:
        raise stopped(run, exc, start=start, before=before, resumed_from=ckpt, eval_steps=evals.steps) from exc
    finally:
        signals.uninstall()
        close_backend(run)
        run.logger.close()
    return run


def start_engine(run: Run, first_step: int, resumed: bool) -> None:
    """Start the run's rollout engine (none for ``rollout.backend: hf``) from the policy's weights; with
    ``rollout.async_generation`` its producer too, which wraps the engine and the sampler from here on."""
    run.rollout_backend = make_backend(run)
    if push_at_start(run.cfg, resumed):
        # the engine starts from the checkpoint's (the policy's) weights
        sync_weights(run, after_update=False)
    # generates step s + 1 while step s updates (async_rollouts.py)
    start_async_rollouts(run, first_step)


# ---- the state a checkpoint holds beside the weights ---------------------------------------------------------


def state(run: Run) -> dict[str, Any]:
    """Return the loop's state (a copy): sampler, counters, what the loss's providers keep, this process's
    augmentation."""
    saved = {
        "sampler": run.sampler.state_dict(),
        "counters": run.counters.as_dict(),
        # what the loss's providers keep (DCPO: prev_entropy, GEPO: entropy_history)
        **run.loss_extras.state_dict(),
    }
    if run.augmenter is not None:
        saved["augment"] = run.augmenter.state_dict()
    return copy.deepcopy(saved)


def load_state(run: Run, saved: dict[str, Any]) -> None:
    """Load a checkpoint's trainer state back into the run, mirroring ``state`` (its run id: rotation goes on over the
    checkpoints of the run it continues; this process's own augmentation state)."""
    run.adopt(saved)
    run.sampler.load_state_dict(saved["sampler"])
    run.counters.__dict__.update(saved.get("counters", {}))
    run.loss_extras.load_state_dict(saved)
    if run.augmenter is not None:
        mine = own_state(saved, run.accelerator.process_index)
        if mine is not None:
            run.augmenter.load_state_dict(mine)


def check_state(run: Run, saved: dict[str, Any]) -> None:
    """Try ``load_state`` on copies (every process's augmentation state: every process decides alike), so resume finds a
    state it cannot take before any part of it is applied."""
    copy.deepcopy(run.sampler).load_state_dict(saved["sampler"])
    if not isinstance(saved.get("counters", {}), dict):
        raise ValueError("counters is not an object")
    copy.deepcopy(run.loss_extras).load_state_dict(saved)
    if run.augmenter is not None:
        for rank in range(run.accelerator.num_processes):
            mine = own_state(saved, rank)
            if mine is not None:
                copy.deepcopy(run.augmenter).load_state_dict(mine)


def with_every_rank(accelerator: Accelerator, saved: dict[str, Any]) -> dict[str, Any]:
    """Return ``saved`` plus ``augment_by_rank``: every process's augmentation state, gathered (``augment`` stays this
    process's, the main one's in the file). A collective when more than one process runs: all call it."""
    if "augment" not in saved:
        return saved
    if accelerator.num_processes == 1:
        return {**saved, "augment_by_rank": [saved["augment"]]}
    return {**saved, "augment_by_rank": accelerate.utils.gather_object([saved["augment"]])}


def own_state(saved: dict, process_index: int) -> dict | None:
    """Return this process's augmentation state in a checkpoint's trainer state (None: the checkpoint has none for it,
    e.g. a run resumed on more processes than saved it: that process starts with an empty FIFO)."""
    by_rank = saved.get("augment_by_rank")
    if by_rank is None:  # a checkpoint written before states were kept per process
        return saved.get("augment")
    return by_rank[process_index] if process_index < len(by_rank) else None


def save(run: Run, step: int, saved: dict[str, Any] | None = None) -> Path | None:
    """Checkpoint ``step`` with ``saved`` (default: the state now); return its path on the main process."""
    return save_checkpoint(
        run.accelerator,
        run.cfg.output_dir,
        step,
        run.model,
        run.optimizer,
        scheduler=run.scheduler,
        state=with_every_rank(run.accelerator, saved if saved is not None else state(run)),
        processor=run.processor,
        keep=run.cfg.save_total_limit,
        run_id=run.run_id,
    )


# ---- stops ---------------------------------------------------------------------------------------------------


def stopped(
    run: Run, exc: BaseException, *, start: int, before: dict[str, Any], resumed_from: Path | None, eval_steps: int
) -> RunStopped:
    """Save the last finished step and say how to go on. A fault inside a step comes before its update: the
    weights are those after step - 1, saved with the state from before the step (resume replays the step). An
    engine that dies taking a step's weights (``EngineDiedAfterUpdate``) comes after the update: the step is
    finished, and is saved as itself with its state, never under step - 1's number (resume continues with the
    next step and pushes the checkpoint's weights to a new engine). A fault before any step saves nothing."""
    step = run.step
    if isinstance(exc, EngineDiedAfterUpdate):
        saved = state(run)
        if eval_steps and step % eval_steps == 0:
            # the push failed before this step's eval: resume runs it first
            saved["eval_pending"] = step
        path = save(run, step, saved)
        return RunStopped(
            f"run stopped after step {step}'s update: {exc}; last checkpoint: {path} (step {step}, "
            f"finished; resume=auto continues with step {step + 1})"
        )
    if step > start:
        path = save(run, step - 1, before)
        return RunStopped(
            f"run stopped at step {step}: {exc}; last checkpoint: {path} (the last finished "
            "step; resume=auto replays this one)"
        )
    return RunStopped(
        f"run stopped before step {start + 1}: {exc}; last checkpoint: {resumed_from} "
        "(nothing ran since; resume=auto starts from it)"
    )


def interrupted(run: Run, signals: StopRequest, *, last: int, start: int, resumed_from: Path | None) -> Interrupted:
    """Save step ``last`` (finished; unless ``save_steps`` just did, or nothing ran since the checkpoint resumed
    from) and say how to go on (``signals.py``)."""
    cfg = run.cfg
    if last > start:
        done = cfg.save_steps and last % cfg.save_steps == 0
        path = checkpoints(cfg.output_dir)[-1] if done else save(run, last)
        where = f"last checkpoint: {path} (step {last}, finished; resume=auto continues with step {last + 1})"
    else:
        where = f"last checkpoint: {resumed_from} (nothing ran since; resume=auto starts from it)"
    return Interrupted(f"run stopped by {signals.name} after step {last}; {where}", signals.signum or 15)


# ---- watching a run that samples its policy ------------------------------------------------------------------


def monitor(run: Run, start: int) -> HealthMonitor:
    """Build the run's alarm monitor; a resumed run replays the rows it logged before."""
    rows = []
    if start and (Path(run.cfg.output_dir) / "metrics.jsonl").exists():
        rows = [r for r in read_metrics(run.cfg.output_dir) if r.get("step", 0) <= start]
    main = run.accelerator.is_main_process  # every process sees the same reduced metrics: one speaks
    assert run.logger is not None  # setup_run gives every run its logger
    return HealthMonitor(run.cfg.health, run.event if main else (lambda *a, **k: None), run.logger.say, rows)


def in_training_eval(run: Run) -> InTrainingEval:
    """Return ``eval_steps`` and ``eval_limit`` as set. With ``eval_steps`` left unset, take the reward-hacking alarm's
    period when that alarm is on, the run is at least its window long and the task pack has an eval split; the eval then
    runs on the alarm's ``eval_limit`` docs unless ``eval_limit`` is set. Else there is no in-training eval."""
    cfg, h = run.cfg, run.cfg.health
    if cfg.eval_steps is not None:
        return InTrainingEval(cfg.eval_steps, cfg.eval_limit)
    if not (h.enabled and h.reward_hacking.enabled and cfg.max_steps >= h.reward_hacking.window):
        return InTrainingEval(0, cfg.eval_limit)
    # the split is loaded (and cached) at the size the evals will use
    limit = cfg.eval_limit if cfg.eval_limit is not None else h.reward_hacking.eval_limit
    if not has_eval_split(cfg, run.processor.tokenizer, limit=limit):
        run.event(
            "no_eval_split",
            reason=f"task {cfg.data.task!r}: no eval split; the reward-hacking alarm has no held-out metric to read",
        )
        return InTrainingEval(0, limit)
    return InTrainingEval(h.reward_hacking.eval_steps, limit)


def evaluate(run: Run, step: int, evals: InTrainingEval) -> dict[str, float]:
    """Run the harness on the eval split now (``mmreason.eval.in_training``)."""
    return evaluate_during_training(run, step, limit=evals.limit)
