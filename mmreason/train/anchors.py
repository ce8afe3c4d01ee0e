"""Anchors inside a step (mmreason/sampling/anchors.py): a group whose rollouts all fail gets one rollout replaced
by an off-policy anchor (a past success of the prompt, R³; or its reference answer, DaGRPO), scored like a
rollout; or (``source: reflect``, R³'s in-context reflection) is rolled out again with a past failure in its
prompt. Every step's successes go into the replay buffer. Single-turn groups only (an episode is skipped)."""

from __future__ import annotations

import torch

from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.chat_turns import turn_end
from mmreason.sampling.anchors import AnchorBuffer, StoredSuccess, all_fail
from mmreason.sampling.refine import refinement_sample
from mmreason.train.records import Drawn
from mmreason.types import Sample, Trajectory


def anchor_groups(
    run,
    step: int,
    prompts: list[Drawn],
    trajectories: list[Trajectory],
    samples: list[Sample],
    batch: RewardBatch,
    build_sample,
    roll_out,
    score,
):
    """(prompts, trajectories, samples, batch, metrics) with an anchor in each all-fail group that has one."""
    cfg = run.cfg.anchor
    if run.anchor_buffer is None:
        run.anchor_buffer = AnchorBuffer(cfg.buffer_size)
    if cfg.source == "reflect":
        return reflect_groups(run, step, prompts, trajectories, samples, batch, build_sample, roll_out, score)
    total = batch.total(run.cfg.reward_missing).tolist()
    trajectories, samples = list(trajectories), list(samples)
    multiturn = run.pack.make_environment is not None and run.cfg.rollout.max_turns > 1
    rows_of = {d.slot: [i for i, t in enumerate(trajectories) if t.group_id == d.slot] for d in prompts}
    failing = [d for d in prompts if rows_of[d.slot] and all_fail([total[i] for i in rows_of[d.slot]], cfg.threshold)]
    replaced: list[int] = []
    todo: list[Drawn] = []
    for d in [] if multiturn else failing:
        anchor = anchor_trajectory(run, d, trajectories[rows_of[d.slot][-1]])
        if anchor is not None:
            row = rows_of[d.slot][-1]
            trajectories[row] = anchor
            replaced.append(row)
            todo.append(d)
    if replaced:
        new_samples, new_batch = score(run, todo, [trajectories[i] for i in replaced])
        merged = RewardBatch.concat([batch, new_batch])  # aligns the columns by name
        values = merged.values[: len(trajectories)].clone()
        values[replaced] = merged.values[len(trajectories) :]
        for i, s in zip(replaced, new_samples):
            samples[i] = s
        batch = RewardBatch(values, merged.names, merged.weights, merged.errors)
    remember_successes(run, prompts, trajectories, batch.total(run.cfg.reward_missing).tolist())
    metrics = {
        "anchor/all_fail_groups": float(len(failing)),
        "anchor/added": float(len(replaced)),
        "anchor/buffer": float(len(run.anchor_buffer)),
    }
    return prompts, trajectories, samples, batch, metrics


def anchor_trajectory(run, d: Drawn, replaced: Trajectory) -> Trajectory | None:
    """The anchor of group ``d`` in the shape of a rollout of its prompt, or None when there is none."""
    cfg, prompt = run.cfg.anchor, d.prompt
    if cfg.source == "replay":
        stored = run.anchor_buffer.latest(d.index)
        if stored is None:
            return None
        completion, text, logprobs = stored.token_ids, stored.text, stored.logprobs
    else:
        text = run.pack.target_text(prompt.sample)  # what rewards score; the tokens end the turn, as SFT's
        ended = text + turn_end(run.processor).strip()
        completion = run.processor.tokenizer(ended, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
        completion, logprobs = completion[: run.cfg.rollout.max_completion_length], None
    ids = torch.cat([prompt.input_ids, completion])
    mask = torch.zeros_like(ids)
    mask[prompt.length :] = 1
    rollout_lp = None
    if logprobs is not None:
        rollout_lp = torch.cat([torch.zeros(prompt.length), logprobs.float()])
    return Trajectory(
        replaced.sample_id,
        replaced.group_id,
        ids,
        mask,
        prompt.length,
        text,
        mm_token_type_ids=torch.cat([prompt.mm_token_type_ids, torch.zeros_like(completion)]),
        visual=replaced.visual,
        reward_info={"anchor": run.cfg.anchor.source},
        rollout_logprobs=rollout_lp,
    )


def remember_successes(run, prompts: list[Drawn], trajectories: list[Trajectory], total: list[float]) -> None:
    """Every rollout (not an anchor) with total reward above the threshold joins its prompt's replay buffer."""
    index_of = {d.slot: d.index for d in prompts}
    for t, r in zip(trajectories, total):
        if r > run.cfg.anchor.threshold and "anchor" not in t.reward_info:
            start = t.prompt_length
            lp = None if t.rollout_logprobs is None else t.rollout_logprobs[start:].clone()
            run.anchor_buffer.add(
                index_of[t.group_id], StoredSuccess(t.token_ids[start:].clone(), t.completion_text, lp)
            )


def reflect_groups(
    run,
    step: int,
    prompts: list[Drawn],
    trajectories: list[Trajectory],
    samples: list[Sample],
    batch: RewardBatch,
    build_sample,
    roll_out,
    score,
):
    """R³'s in-context reflection: an all-fail group is rolled out again with a failed attempt of the prompt in
    its prompt (the most recent one kept from an earlier step, else this group's first), and the new group
    replaces it (on-policy: the step trains on the completions the reflective prompt produced)."""
    cfg = run.cfg.anchor
    total = batch.total(run.cfg.reward_missing).tolist()
    replaced: dict[int, Drawn] = {}
    for d in prompts:
        rows = [i for i, t in enumerate(trajectories) if t.group_id == d.slot]
        if not rows or not all_fail([total[i] for i in rows], cfg.threshold):
            continue
        past = run.anchor_buffer.latest(-1 - d.index)  # failures are kept under -1 - index
        failure = past.text if past is not None else trajectories[rows[0]].completion_text
        prompt = build_sample(run, refinement_sample(d.prompt.sample, failure, cfg.reflect_template))
        if prompt is not None:
            replaced[d.slot] = Drawn(d.slot, d.index, prompt)
    for d in prompts:  # this step's failures are the next steps' reflections
        for i, t in enumerate(trajectories):
            if t.group_id == d.slot and total[i] <= cfg.threshold:
                run.anchor_buffer.add(
                    -1 - d.index, StoredSuccess(t.token_ids[t.prompt_length :].clone(), t.completion_text)
                )
    metrics = {
        "anchor/all_fail_groups": float(len(replaced)),
        "anchor/added": 0.0,
        "anchor/reflected": float(len(replaced)),
        "anchor/buffer": float(len(run.anchor_buffer)),
    }
    new = list(replaced.values())
    new_trajs = roll_out(run, new, step) if new else []
    if not new_trajs:
        metrics["anchor/reflected"] = 0.0
        return prompts, trajectories, samples, batch, metrics
    new_samples, new_batch = score(run, new, new_trajs)
    keep = [i for i, t in enumerate(trajectories) if t.group_id not in replaced]
    merged = RewardBatch.concat([batch.take(keep), new_batch])
    return (
        [replaced.get(d.slot, d) for d in prompts],
        [trajectories[i] for i in keep] + new_trajs,
        [samples[i] for i in keep] + new_samples,
        merged,
        metrics,
    )
