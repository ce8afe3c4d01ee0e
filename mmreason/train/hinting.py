"""SAGE self-hinting inside a step (mmreason/sampling/hinting.py): groups whose rollouts all fail get hints
written by the policy itself from the reference solution, and are rolled out again, level by level, until a
rollout succeeds or the levels run out; the step trains on the groups as they end (hinted prompt included).

The hint request is a text-only, single-turn generation of ``hint.attempts`` replies per prompt (the authors
retry a failed parse up to 3 times; here the attempts are sampled together and the first reply that parses is
used). A hint that states a reference answer is refused (``hint.refuse_answer_leak``). A group without a usable
hint, or whose hinted prompt cannot be built, keeps its rollouts.
"""

from __future__ import annotations

from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.generate import GenerationSettings, generate_groups, group_seed
from mmreason.sampling.hinting import (
    hint_request,
    hinted_sample,
    leaks_answer,
    needs_hint,
    parse_hints,
    solution_of,
)
from mmreason.train.records import Drawn
from mmreason.types import Sample, Trajectory


def write_hints(run, requests: list[Drawn], step: int) -> list[Trajectory]:
    """``hint.attempts`` single-turn replies per hint request (group id = the request's slot)."""
    if not requests:
        return []
    r, h = run.cfg.rollout, run.cfg.hint
    settings = GenerationSettings(h.max_hint_tokens, r.temperature, r.top_p, r.top_k)
    model = run.accelerator.unwrap_model(run.model)
    model.eval()
    try:
        return generate_groups(
            model,
            run.processor,
            [d.prompt for d in requests],
            [d.slot for d in requests],
            h.attempts,
            settings,
            [group_seed(run.cfg.seed, step, f"hint/{d.key}") for d in requests],
        )
    finally:
        model.train()


def _hints(run, step: int, need: list[Drawn], build_sample, write) -> dict[int, list[str | None]]:
    """Slot -> the parsed hint levels of each group that needs one (groups without a usable reply left out)."""
    h = run.cfg.hint
    requests = []
    for d in need:
        solution = solution_of(d.prompt.sample, h.solution_key)
        prompt = build_sample(run, hint_request(d.prompt.sample, solution)) if solution else None
        if prompt is not None:
            requests.append(Drawn(d.slot, d.index, prompt))
    sample_of = {d.slot: d.prompt.sample for d in need}
    out: dict[int, list[str | None]] = {}
    for t in write(run, requests, step):
        if t.group_id in out:
            continue
        levels = parse_hints(t.completion_text, h.levels, h.max_hint_chars)
        if levels is None:
            continue
        if h.refuse_answer_leak:
            levels = [x if x is None or not leaks_answer(x, sample_of[t.group_id]) else None for x in levels]
        if any(levels):
            out[t.group_id] = levels
    return out


def hint_groups(
    run,
    step: int,
    prompts: list[Drawn],
    trajectories: list[Trajectory],
    samples: list[Sample],
    batch: RewardBatch,
    build_sample,
    roll_out,
    score,
    write=write_hints,
):
    """(prompts, trajectories, samples, batch, metrics) after hinting the groups whose rollouts all fail."""
    h, missing = run.cfg.hint, run.cfg.reward_missing
    groups = {d.slot: _group(d.slot, trajectories, samples, batch) for d in prompts}

    def unresolved(slot: int) -> bool:
        return needs_hint(groups[slot][2].total(missing).tolist(), h.threshold)

    errors = list(batch.errors)
    need = [d for d in prompts if unresolved(d.slot)]
    metrics = {"hint/prompts_needing_hint": float(len(need))}
    hints = _hints(run, step, need, build_sample, write) if need else {}
    metrics["hint/prompts_with_hints"] = float(len(hints))
    current = {d.slot: d for d in prompts}
    for level in range(h.levels):
        todo = []
        for d in need:
            text = hints.get(d.slot, [None] * h.levels)[level]
            if text is None or not unresolved(d.slot):
                continue
            prompt = build_sample(run, hinted_sample(d.prompt.sample, text))
            if prompt is not None:
                todo.append(Drawn(d.slot, d.index, prompt))
        new_trajs = roll_out(run, todo, step) if todo else []
        if not new_trajs:
            metrics[f"hint/used_level_{level + 1}"] = 0.0
            continue
        new_samples, new_batch = score(run, todo, new_trajs)
        errors += new_batch.errors
        for d in todo:
            groups[d.slot] = _group(d.slot, new_trajs, new_samples, new_batch)
            current[d.slot] = d
        metrics[f"hint/used_level_{level + 1}"] = float(len(todo))
    metrics["hint/resolved_after_hint"] = float(sum(not unresolved(d.slot) for d in need))
    out_prompts = [current[d.slot] for d in prompts]
    out_trajs = [t for d in prompts for t in groups[d.slot][0]]
    out_samples = [s for d in prompts for s in groups[d.slot][1]]
    return out_prompts, out_trajs, out_samples, _merged([groups[d.slot][2] for d in prompts], errors), metrics


def _group(
    slot: int, trajectories: list[Trajectory], samples: list[Sample], batch: RewardBatch
) -> tuple[list[Trajectory], list[Sample], RewardBatch]:
    """The rows of group ``slot``: its trajectories, samples and rewards."""
    rows = [i for i, t in enumerate(trajectories) if t.group_id == slot]
    return [trajectories[i] for i in rows], [samples[i] for i in rows], batch.take(rows)


def _merged(parts: list[RewardBatch], errors: list) -> RewardBatch:
    """The groups' rows in order, columns of the widest part (``concat`` takes the last part's names), each
    error record once (``take`` copies a batch's records into every part)."""
    widest = max(parts, key=lambda b: len(b.names))
    merged = RewardBatch.concat([*parts, widest.take([])])
    return RewardBatch(merged.values, merged.names, merged.weights, list(errors))
