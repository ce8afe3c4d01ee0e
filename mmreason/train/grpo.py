"""The GRPO-family training loop. One step reads like the flow:

    sample prompts -> build prompts -> roll out G completions each -> rewards -> advantages
    -> num_iterations passes of mini-batch updates (policy loss + KL) -> optimizer step

Each phase is a function below; the loop owns no task-specific code. Estimators, losses,
aggregations and KL estimators are looked up by name in ``mmreason.rl``'s registries.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from mmreason.media import MediaError
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings, generate_group, group_seed
from mmreason.rollout.multiturn import generate_multiturn_group
from mmreason.rollout.prompts import PromptInputs, PromptTooLong, build_prompt
from mmreason.train.checkpoint import load_checkpoint, resolve_resume, save_checkpoint
from mmreason.train.config import TrainConfig
from mmreason.train.logging import RunLogger
from mmreason.train.setup import Run, setup_run
from mmreason.types import Sample, Trajectory


class RunStopped(RuntimeError):
    """A configured fault limit was passed; a checkpoint was saved first."""


@dataclass
class Scored:
    """A step's rollouts with everything the update needs."""

    trajectories: list[Trajectory]
    samples: list[Sample]  # one per trajectory
    rewards: torch.Tensor  # [N, K] (NaN = does not apply)
    reward_names: list[str]
    total_reward: torch.Tensor  # [N] weighted sum used for logging
    advantages: torch.Tensor  # [N]
    keep: torch.Tensor  # [N] bool: trajectories that enter the loss
    tasks: list[str]  # [N] task of each trajectory (algorithm.task_key)


# ---- phases -------------------------------------------------------------------------------------


@dataclass
class Drawn:
    """One prompt of this step: its slot in the step's global batch (the group id: unique even when a
    sampler draws the same prompt twice), the dataset index the sampler drew, and its model inputs."""

    slot: int
    index: int
    prompt: PromptInputs

    @property
    def key(self) -> str:  # names the group's sampling seed; independent of how prompts split over ranks
        return f"{self.slot}:{self.prompt.sample.id}"


def sample_prompts(run: Run) -> list[tuple[int, int]]:
    """(slot, dataset index) of this process's slice; every process draws the same global batch."""
    acc, n = run.accelerator, run.cfg.prompts_per_step
    global_indices = run.sampler.next_indices(n * acc.num_processes)
    start = acc.process_index * n
    return list(enumerate(global_indices[start : start + n], start=start))


def build_prompts(run: Run, drawn: list[tuple[int, int]]) -> list[Drawn]:
    """Prompts for the drawn samples; broken media and over-long prompts are counted and skipped."""
    out = [Drawn(slot, index, load_prompt(run, index)) for slot, index in drawn]
    return [d for d in out if d.prompt is not None]


def load_prompt(run: Run, index: int, split: str = "train") -> PromptInputs | None:
    """One dataset sample as model inputs for this draw, or None (counted and logged) when it cannot be.

    Past ``max_bad_samples`` broken samples the run stops (the loop saves a checkpoint first).
    """
    d = run.cfg.data
    sample = run.pack.prepare(run.dataset[index], split=split, seed=run.cfg.seed, step=run.step)
    try:
        return build_prompt(run.processor, sample, max_prompt_length=d.max_prompt_length, min_pixels=d.min_pixels,
                            max_pixels=d.max_pixels, video_fps=d.video_fps, video_max_frames=d.video_max_frames,
                            overflow=d.prompt_overflow, system_prompt=d.system_prompt)
    except PromptTooLong as exc:
        run.counters.filtered_prompts += 1
        _event(run, "prompt_filtered", sample_id=sample.id, reason=str(exc))
    except (MediaError, OSError, ValueError) as exc:
        run.counters.bad_samples += 1
        _event(run, "bad_sample", sample_id=sample.id, reason=str(exc))
        if run.counters.bad_samples > run.cfg.max_bad_samples:
            raise RunStopped(f"{run.counters.bad_samples} broken samples (max_bad_samples="
                             f"{run.cfg.max_bad_samples}); last: {sample.id!r}: {exc}") from exc
    return None


def roll_out(run: Run, drawn: list[Drawn], step: int) -> list[Trajectory]:
    """G trajectories per prompt (single-turn, or multi-turn when the task has an environment)."""
    r = run.cfg.rollout
    settings = GenerationSettings(r.max_completion_length, r.temperature, r.top_p, r.top_k)
    model = run.accelerator.unwrap_model(run.model)
    model.eval()
    trajectories: list[Trajectory] = []
    for d in drawn:
        if run.pack.make_environment is not None and r.max_turns > 1:
            max_context = run.cfg.data.max_prompt_length + r.max_completion_length * r.max_turns
            trajectories += generate_multiturn_group(
                model, run.processor, d.prompt, run.pack.make_environment, d.slot, r.num_generations, settings,
                r.max_turns, max_context, run.cfg.seed, step, key=d.key)
        else:
            seed = group_seed(run.cfg.seed, step, d.key)
            trajectories += generate_group(model, run.processor, d.prompt, d.slot, r.num_generations, settings,
                                           seed)
    model.train()
    return trajectories


def score(run: Run, drawn: list[Drawn], trajectories: list[Trajectory]):
    """Rewards [N, K] from the reward runner (errors are counted there, under max_reward_errors)."""
    by_slot = {d.slot: d.prompt.sample for d in drawn}
    samples = [by_slot[t.group_id] for t in trajectories]
    try:
        batch = run.rewards(samples, trajectories)
    finally:
        run.counters.reward_errors = run.rewards.total_errors
    for err in batch.errors:
        _event(run, "reward_error", **dataclasses.asdict(err))
    return samples, batch


def task_names(run: Run, samples: list[Sample]) -> list[str]:
    """Each trajectory's task (the ``task_key`` column, else the pack name) for per-task math and metrics."""
    key = run.cfg.algorithm.task_key
    return [str(s.meta.get(key) or s.task or run.pack.name) for s in samples]


def task_index(names: list[str]) -> torch.Tensor:
    order = {name: i for i, name in enumerate(sorted(set(names)))}
    return torch.tensor([order[n] for n in names], dtype=torch.long)


def compute_advantages(run: Run, rewards: torch.Tensor, weights: torch.Tensor, group_ids: torch.Tensor,
                       tasks: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages [N] and the keep mask [N] (estimator loss mask x dynamic-sampling filter)."""
    from mmreason import rl

    a = run.cfg.algorithm
    options = dict(a.estimator_options)
    accepted = _accepted(rl.ESTIMATORS.get(a.estimator))
    if "scale_rewards" in accepted and "scale_rewards" not in options:
        options["scale_rewards"] = a.scale_rewards
    if "task_ids" in accepted and "task_ids" not in options:
        options["task_ids"] = task_index(tasks)
    result = rl.advantages(a.estimator, rewards, group_ids, weights=weights, **options)
    keep = result.keep_mask()
    if a.dynamic_sampling:
        total = torch.nan_to_num(rewards, nan=0.0) @ weights  # [N]
        filtered = rl.dynamic_sampling_filter(total, group_ids)
        keep = keep & filtered.keep
        run.counters.dropped_groups += int(filtered.num_dropped)
    return result.advantages, keep


def policy_update(run: Run, scored: Scored) -> dict[str, float]:
    """num_iterations passes over mini-batches; gradient accumulation inside one optimizer step each.

    Mini-batch losses are weighted so the accumulated gradient is that of the whole batch: token-mean
    aggregation divides by the batch's total response tokens, sequence-mean ones weight each mini-batch
    by its share of the trajectories.
    """
    from mmreason import rl

    cfg, a = run.cfg, run.cfg.algorithm
    keep = scored.keep.tolist()
    trajs = [t for t, k in zip(scored.trajectories, keep) if k]
    if not trajs:
        return {"loss": 0.0, "skipped_update": 1.0}
    adv = scored.advantages[scored.keep]  # [N]
    gids = torch.tensor([t.group_id for t in trajs])  # [N]
    band = entropy_band_rows(a, [name for name, k in zip(scored.tasks, keep) if k])
    pad = run.processor.tokenizer.pad_token_id
    size = cfg.mini_batch_size
    chunks = [list(range(i, min(i + size, len(trajs)))) for i in range(0, len(trajs), size)]
    batches = [collate([trajs[i] for i in c], pad).to(run.device) for c in chunks]
    token_mean = rl.aggregation_for_loss_type(a.loss_type) == "token_mean"
    total_tokens = float(sum(t.completion_length for t in trajs))
    with torch.no_grad():
        old = [token_logprobs(run.model, b)[0] if a.num_iterations > 1 else None for b in batches]
        ref = [token_logprobs(run.ref_model, b)[0] if run.ref_model is not None else None for b in batches]
    stats: dict[str, list[float]] = {}
    for _ in range(a.num_iterations):
        for c, b, o, r in zip(chunks, batches, old, ref):
            options = _loss_options(a, cfg, r, gids[c]) | ({"num_tokens": total_tokens} if token_mean else {})
            rows = None if band is None else tuple(x[c].to(run.device) for x in band)
            loss, metrics, ent = minibatch_loss(run, b, o, adv[c].to(run.device), options, rows, stats)
            loss = loss if token_mean else loss * (len(c) / len(trajs))
            if not torch.isfinite(loss):
                return _skip_update(run, "nonfinite_loss")
            run.accelerator.backward(loss)
            _collect(stats, metrics, ent, b.action_mask, loss)
        grad_norm = run.accelerator.clip_grad_norm_(run.model.parameters(), cfg.max_grad_norm)
        if not torch.isfinite(torch.as_tensor(grad_norm)):
            return _skip_update(run, "nonfinite_grad")
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad(set_to_none=True)
        stats.setdefault("grad_norm", []).append(float(grad_norm))
    return {k: sum(v) / len(v) for k, v in stats.items()}


def minibatch_loss(run: Run, batch, old_logprobs, advantages, options, band, stats):
    """Policy loss (+ KL, + entropy band) of one mini-batch: (loss, loss metrics, entropy [n, T])."""
    from mmreason import rl

    a = run.cfg.algorithm
    logp, ent = token_logprobs(run.model, batch, with_entropy=True)  # [n, T] fp32
    old = old_logprobs if old_logprobs is not None else logp.detach()  # on-policy: ratio 1
    out = rl.POLICY_LOSSES.get(a.policy_loss)(logp, old, advantages, batch.action_mask, **options)
    loss = out.loss
    if band is not None:
        h_min, h_max, ids = band
        penalty = rl.entropy_band_penalty(ent, batch.action_mask, h_min, h_max, ids)
        loss = loss + a.entropy_coef * penalty
        stats.setdefault("entropy_penalty", []).append(float(penalty.detach()))
    return loss, out.metrics, ent


def _skip_update(run: Run, kind: str) -> dict[str, float]:
    """A NaN/inf loss or gradient: drop this step's update, count it, keep going."""
    run.counters.nan_steps += 1
    _event(run, kind, step=run.step)
    run.optimizer.zero_grad(set_to_none=True)
    return {"loss": float("nan"), "skipped_update": 1.0}


def entropy_band_rows(a, tasks: list[str]):
    """Per-row entropy bands from ``algorithm.entropy_band`` (None when entropy shaping is off)."""
    if a.entropy_coef == 0 or not a.entropy_band:
        return None
    bands = []
    for name in tasks:
        band = a.entropy_band.get(name, a.entropy_band.get("default"))
        if band is None:
            raise ValueError(f"algorithm.entropy_band has no band for task {name!r} and no 'default'")
        bands.append(band)
    h = torch.tensor(bands, dtype=torch.float32)  # [N, 2]
    return h[:, 0], h[:, 1], task_index(tasks)


def _loss_options(a, cfg: TrainConfig, ref_logprobs, group_ids) -> dict[str, Any]:
    from mmreason import rl

    options = dict(epsilon=a.epsilon, epsilon_high=a.epsilon_high, importance_sampling_level=a.importance_sampling_level,
                   aggregation=rl.aggregation_for_loss_type(a.loss_type), max_len=cfg.rollout.max_completion_length,
                   ref_logprobs=ref_logprobs, beta=a.beta, kl_estimator=a.kl_estimator, group_ids=group_ids)
    accepted = _accepted(rl.POLICY_LOSSES.get(a.policy_loss))
    return {k: v for k, v in options.items() if k in accepted}


def _accepted(fn) -> set[str]:
    """Keyword options a registered function takes (so shared settings reach only those that use them)."""
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}


def _collect(stats: dict[str, list[float]], metrics, entropy, mask, loss) -> None:
    def add(key, value):
        if value is not None:
            stats.setdefault(key, []).append(float(value))

    add("loss", loss.detach())
    add("policy_loss", metrics.policy_loss)
    add("kl", metrics.kl)
    add("ratio_mean", metrics.ratio_mean)
    add("clip/low", metrics.clip_low)
    add("clip/high", metrics.clip_high)
    add("clip/region", metrics.clip_region)
    if entropy is not None:
        add("entropy", (entropy.detach() * mask).sum() / mask.sum().clamp(min=1))


# ---- one step and the loop ----------------------------------------------------------------------


def train_step(run: Run, step: int) -> dict[str, Any]:
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    prompts = build_prompts(run, sample_prompts(run))
    t1 = time.perf_counter()
    trajectories = roll_out(run, prompts, step)
    t2 = time.perf_counter()
    metrics: dict[str, Any] = {}
    if not trajectories:
        metrics["skipped_update"] = 1.0
        times.update(generate=t2 - t1, reward=0.0, update=0.0)
    else:
        samples, batch = score(run, prompts, trajectories)
        t3 = time.perf_counter()
        gids = torch.tensor([t.group_id for t in trajectories])
        tasks = task_names(run, samples)
        adv, keep = compute_advantages(run, batch.values, batch.weights, gids, tasks)
        total = batch.total(run.cfg.reward_missing)
        scored = Scored(trajectories, samples, batch.values, batch.names, total, adv, keep, tasks)
        observe_sampler(run, prompts, trajectories, total)
        metrics.update(policy_update(run, scored))
        t4 = time.perf_counter()
        metrics.update(rollout_metrics(run, scored))
        times.update(generate=t2 - t1, reward=t3 - t2, update=t4 - t3)
        if run.cfg.log_completions_steps and step % run.cfg.log_completions_steps == 0 and run.logger:
            run.logger.completions(step, completion_rows(scored))
    times["step"] = time.perf_counter() - t0
    times["other"] = times["step"] - times["generate"] - times["reward"] - times["update"]
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
    for start in range(0, len(mine), n):
        drawn = build_prompts(run, [(slot, index) for slot, index in enumerate(mine[start : start + n])])
        trajectories = roll_out(run, drawn, step)
        if not trajectories:
            continue
        _, batch = score(run, drawn, trajectories)
        index_of = {d.slot: d.index for d in drawn}
        for t, reward in zip(trajectories, batch.total(run.cfg.reward_missing).tolist()):
            rewards, texts = scores.setdefault(index_of[t.group_id], ([], []))
            rewards.append(reward)
            texts.append(t.completion_text)
    if acc.num_processes > 1:
        from accelerate.utils import gather_object

        merged: dict[int, tuple[list[float], list[str]]] = {}
        for part in gather_object([scores]):
            merged.update(part)
        scores = merged
    run.sampler.refresh(scores)


def rollout_metrics(run: Run, s: Scored) -> dict[str, float]:
    from mmreason import rl

    m: dict[str, float] = {}
    lengths = torch.tensor([float(t.completion_length) for t in s.trajectories])
    m["reward/mean"] = float(s.total_reward.mean())
    m["reward/std"] = float(s.total_reward.std(unbiased=False))
    for k, name in enumerate(s.reward_names):
        col = s.rewards[:, k]
        valid = col[~torch.isnan(col)]
        m[f"rewards/{name}/mean"] = float(valid.mean()) if valid.numel() else float("nan")
        m[f"rewards/{name}/std"] = float(valid.std(unbiased=False)) if valid.numel() else float("nan")
    if s.tasks:
        for name in sorted(set(s.tasks)):
            rows = torch.tensor([t == name for t in s.tasks])
            m[f"reward/{name}/mean"] = float(s.total_reward[rows].mean())
            m[f"completion/{name}/length_mean"] = float(lengths[rows].mean())
    gids = torch.tensor([t.group_id for t in s.trajectories])
    zero_std = rl.dynamic_sampling_filter(s.total_reward, gids)
    m["frac_reward_zero_std"] = zero_std.num_dropped / max(zero_std.num_groups, 1)
    m["completion/length_mean"] = float(lengths.mean())
    m["completion/length_max"] = float(lengths.max())
    m["completion/clipped_ratio"] = float(sum(t.truncated for t in s.trajectories) / len(s.trajectories))
    m["advantage/abs_mean"] = float(s.advantages.abs().mean())
    return _reduce_across_processes(run, m)


def _reduce_across_processes(run: Run, m: dict[str, float]) -> dict[str, float]:
    """Mean of each metric over the processes that have it (per-task keys can differ between ranks)."""
    if run.accelerator.num_processes == 1:
        return m
    from accelerate.utils import gather_object

    per_rank = gather_object([m])
    keys = sorted({k for d in per_rank for k in d})
    return {k: sum(d[k] for d in per_rank if k in d) / sum(k in d for d in per_rank) for k in keys}


def completion_rows(s: Scored, limit: int = 16) -> list[dict[str, Any]]:
    rows = []
    for t, sample, r, total, a in zip(s.trajectories, s.samples, s.rewards.tolist(), s.total_reward.tolist(),
                                      s.advantages.tolist()):
        rows.append({"sample_id": t.sample_id, "prompt": sample.prompt_text, "answer": sample.answer,
                     "completion": t.completion_text, "reward": total, "advantage": a,
                     "rewards": dict(zip(s.reward_names, [None if math.isnan(x) else x for x in r]))})
    return rows[:limit]


def _event(run: Run, kind: str, /, **fields) -> None:
    if run.logger is not None:
        run.logger.event(kind, **fields)


def _save(run: Run, step: int):
    state = {"sampler": run.sampler.state_dict(), "counters": run.counters.as_dict()}
    return save_checkpoint(run.accelerator, run.cfg.output_dir, step, run.model, run.optimizer, run.scheduler,
                           state, processor=run.processor, keep=run.cfg.save_total_limit)


def train(cfg: TrainConfig, config_dir: str | None = None) -> Run:
    """The whole run; returns the Run (for tests and notebooks)."""
    from mmreason.rewarding import RewardErrorLimitExceeded

    run = setup_run(cfg, config_dir=config_dir)
    start = 0
    ckpt = resolve_resume(cfg.resume, cfg.output_dir)
    if ckpt is not None:
        state = load_checkpoint(ckpt, run.accelerator, run.model, run.optimizer, run.scheduler)
        run.sampler.load_state_dict(state["sampler"])
        run.counters.__dict__.update(state.get("counters", {}))
        start = int(state["step"])
        if run.accelerator.is_main_process:
            print(f"resumed from {ckpt} at step {start}")
    run.logger = RunLogger(cfg.output_dir, run.accelerator, cfg.max_steps, start, cfg.report_to,
                           config=_config_dict(cfg))
    evaluator = _evaluator(run)
    try:
        for step in range(start + 1, cfg.max_steps + 1):
            run.step = step
            refresh_sampler(run, step)
            metrics = train_step(run, step)
            if evaluator is not None and step % cfg.eval_steps == 0:
                metrics.update(evaluator(run, step))
            if step % max(cfg.logging_steps, 1) == 0 or step == cfg.max_steps:
                run.logger.step(step, metrics)
            if cfg.save_steps and step % cfg.save_steps == 0:
                _save(run, step)
        if not cfg.save_steps or cfg.max_steps % cfg.save_steps:
            _save(run, cfg.max_steps)
    except (RunStopped, RewardErrorLimitExceeded) as exc:
        path = _save(run, run.step)
        raise RunStopped(f"run stopped at step {run.step}: {exc}; last checkpoint: {path}") from exc
    finally:
        run.logger.close()
    if run.accelerator.is_main_process:
        from mmreason.train.plot import plot_run

        print(f"curves: {plot_run(cfg.output_dir)}")
    return run


def _config_dict(cfg: TrainConfig) -> dict:
    from mmreason.config import to_dict

    return to_dict(cfg)


def _evaluator(run: Run):
    if not run.cfg.eval_steps:
        return None
    try:
        from mmreason.eval.in_training import evaluate_during_training
    except ImportError:
        return None
    return evaluate_during_training
