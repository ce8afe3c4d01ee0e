"""The rollouts of one step: draw prompts, generate, score; with DAPO dynamic sampling, keep drawing.

Without dynamic sampling a step is one draw of ``prompts_per_step`` prompts. With it (DAPO, arXiv
2503.14476 §3.2) groups whose total rewards are all equal carry no gradient, so the step draws further
batches of prompts (at most ``algorithm.dynamic_sampling_max_draws`` extra draws) until it holds
``prompts_per_step`` groups with signal. It then keeps exactly ``prompts_per_step`` groups per process:
those with signal first, in draw order, then zero-signal ones if the cap was reached (they stay in the
batch with advantage 0 and leave the loss). Every process draws the same global batches and the decision
to draw again is taken by all processes together, so ranks keep the same sampler state and batch shape.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from mmreason.parallel.agree import any_rank
from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.multiturn import ended_by_limit
from mmreason.rollout.prompts import MEDIA_SECONDS
from mmreason.train.augment import augment_groups
from mmreason.train.hinting import hint_groups
from mmreason.train.records import Drawn
from mmreason.train.refine import refine_groups
from mmreason.types import Sample, Trajectory


@dataclass
class Collected:
    prompts: list[Drawn]  # the kept groups' prompts
    trajectories: list[Trajectory]
    samples: list[Sample]  # one per trajectory
    batch: RewardBatch  # rows = trajectories
    extra_draws: int = 0  # further prompt batches drawn by dynamic sampling
    discarded_groups: int = 0  # groups drawn, rolled out and scored, then not trained on
    reward_seconds: float = 0.0  # of the step's wall time, spent scoring
    prompt_seconds: float = 0.0  # of the step's wall time, spent building prompts (media decode + processor)
    metrics: dict[str, float] = field(default_factory=dict)  # difficulty-aware augmentation's, when on


def collect_rollouts(run, step: int, draw, build, roll_out, score, build_sample=None) -> Collected:
    """One step's scored rollouts. ``draw``/``build``/``roll_out``/``score`` are the loop's phases;
    ``build_sample(run, sample)`` builds one augmented prompt (difficulty-aware augmentation, when on)."""
    cfg = run.cfg
    timed = {"score": 0.0, "build": 0.0}

    def timer(name, fn):
        def wrapped(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                timed[name] += time.perf_counter() - t
        return wrapped

    decoded = MEDIA_SECONDS["video_decode"]
    got = _collect(run, step, cfg, draw, timer("build", build), roll_out, timer("score", score),
                   timer("build", build_sample) if build_sample is not None else None)
    got.metrics["time/video_decode"] = MEDIA_SECONDS["video_decode"] - decoded  # part of time/prompts
    if any("env_seconds" in t.reward_info for t in got.trajectories):  # part of time/generate
        got.metrics["time/environment"] = sum(t.reward_info.get("env_seconds", 0.0) for t in got.trajectories)
        # episodes a limit cut before the model could finish (an observation over max_observation_tokens)
        got.metrics["episodes/cut"] = sum(ended_by_limit(t) for t in got.trajectories)
        got.metrics["episodes/cut_share"] = got.metrics["episodes/cut"] / len(got.trajectories)
    got.reward_seconds, got.prompt_seconds = timed["score"], timed["build"]
    return got


def _collect(run, step: int, cfg, draw, build, roll_out, score, build_sample=None) -> Collected:
    prompts = build(run, draw(run))
    trajectories = roll_out(run, prompts, step)
    if not trajectories:
        return Collected(prompts, [], [], RewardBatch(torch.zeros(0, 0), [], torch.zeros(0)))
    samples, batch = score(run, prompts, trajectories)
    metrics: dict[str, float] = {}
    second = _second_pass(cfg) if build_sample is not None else None  # iGRPO refinement or SAGE hints
    if second is not None:
        prompts, trajectories, samples, batch, metrics = second(
            run, step, prompts, trajectories, samples, batch, build_sample, roll_out, score)
    if getattr(run, "augmenter", None) is not None and build_sample is not None:
        prompts, trajectories, samples, batch, metrics = augment_groups(
            run, step, prompts, trajectories, samples, batch, build_sample, roll_out, score)
    rounds = [(prompts, trajectories, samples, batch)]
    if not cfg.algorithm.dynamic_sampling:
        return Collected(prompts, trajectories, samples, batch, metrics=metrics)
    extra = 0
    while extra < cfg.algorithm.dynamic_sampling_max_draws and _any_rank(run, _signal_groups(rounds, cfg)
                                                                          < cfg.prompts_per_step):
        extra += 1
        offset = extra * cfg.prompts_per_step * run.accelerator.num_processes  # slots stay unique: new seeds
        more = build(run, [(slot + offset, index) for slot, index in draw(run)])
        more_trajs = roll_out(run, more, step)
        if more_trajs:
            more_samples, more_batch = score(run, more, more_trajs)
            if second is not None:
                more, more_trajs, more_samples, more_batch, _ = second(
                    run, step, more, more_trajs, more_samples, more_batch, build_sample, roll_out, score)
            rounds.append((more, more_trajs, more_samples, more_batch))
    got = _keep(rounds, cfg, extra)
    got.metrics = metrics
    return got


def _second_pass(cfg):
    """The within-step regeneration the config turns on (``refine`` or ``hint``; at most one), or None."""
    if getattr(cfg, "refine", None) is not None and cfg.refine.enabled:
        return refine_groups
    if getattr(cfg, "hint", None) is not None and cfg.hint.enabled:
        return hint_groups
    return None


def _group_signal(trajectories: list[Trajectory], batch: RewardBatch, missing: str) -> dict[int, bool]:
    """Group id -> whether its total rewards vary (DAPO's filter, ``rl.dynamic_sampling_filter``)."""
    from mmreason import rl

    group_ids = torch.tensor([t.group_id for t in trajectories])
    keep = rl.dynamic_sampling_filter(batch.total(missing), group_ids).keep.tolist()
    return {t.group_id: k for t, k in zip(trajectories, keep)}


def _signal_groups(rounds, cfg) -> int:
    return sum(sum(_group_signal(t, b, cfg.reward_missing).values()) for _, t, _, b in rounds)


def _any_rank(run, flag: bool) -> bool:
    """True on every process when it is true on any (all processes then draw again together)."""
    return any_rank(run.accelerator, flag)


def _keep(rounds, cfg, extra: int) -> Collected:
    flat = []
    for prompts, trajectories, _, batch in rounds:
        varies = _group_signal(trajectories, batch, cfg.reward_missing)
        for d in prompts:
            flat.append((d, varies.get(d.slot, False)))
    ordered = [d for d, v in flat if v] + [d for d, v in flat if not v]
    kept = {d.slot for d in ordered[: cfg.prompts_per_step]}
    batches, trajectories, samples = [], [], []
    for _, trajs, smp, batch in rounds:
        rows = [i for i, t in enumerate(trajs) if t.group_id in kept]
        trajectories += [trajs[i] for i in rows]
        samples += [smp[i] for i in rows]
        batches.append(batch.take(rows))
    prompts = [d for p, *_ in rounds for d in p if d.slot in kept]
    return Collected(prompts, trajectories, samples, RewardBatch.concat(batches), extra, len(flat) - len(kept))
