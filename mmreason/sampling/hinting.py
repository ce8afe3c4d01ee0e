"""SAGE self-hinting (arXiv 2602.03143): a group whose rollouts all fail is redone with a policy-written hint.

The policy writes graded hints from the reference solution, and the group is rolled out again with the
lightest hint that makes any rollout succeed.

Source: "Self-Hinting Language Models Enhance Reinforcement Learning" (SAGE; Liao et al., arXiv 2602.03143).
The procedure is read from the authors' code (``BaohaoLiao/SAGE``, ``recipe/hint/hint_trainer.py``:
``RayHintTrainer.fit``, branch ``method == "sage"``; ``_parse_hint_payload``, ``_extract_question_and_solution``,
``_build_answer_messages_with_hint``; the hint request in ``recipe/hint/prompt.py``):

    resolved(x)   = any_i r_i(x) > 0                               over the group's G rollouts
    for each unresolved x with a solution s (the ``solution`` column, else the reference answer):
        the policy, prompted with (question, s), writes {"level_1": ..., "level_2": ..., "level_3": ...}
        (minimal -> detailed hints that must not give the final answer; parsed as JSON, retried on failure)
    for level in 1, 2, 3:
        every x still unresolved that has a hint at this level: x' = x ⊕ "Here is a hint to help you:\\n" h_level
        roll out G on x', replace x's group (rollouts and rewards) by them, recompute resolved(x)
    the step trains on the final groups, conditioned on the prompt they were sampled from (on-policy)

Inside a step (``regenerate``) the hint request is a text-only, single-turn generation of ``hint.attempts``
replies per prompt (the authors retry a failed parse up to 3 times; here the attempts are sampled together and
the first reply that parses is used). A hint that states a reference answer is refused
(``hint.refuse_answer_leak``). A group without a usable hint, or whose hinted prompt cannot be built, keeps its
rollouts; the step trains on the groups as they end (hinted prompt included). Choices and differences:
docs/methods/within-step.md#hint.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from mmreason.rollout.generate import GenerationSettings, generate_groups, group_seed
from mmreason.sampling.difficulty import answer_strings
from mmreason.sampling.records import Drawn, Rollouts
from mmreason.sampling.refine import with_user_text
from mmreason.sampling.within_step import StepPhases
from mmreason.types import Sample, Trajectory

HINT_SYSTEM_PROMPT = (
    "You write hints that help a student solve a hard problem without giving the solution away.\n"
    "You are given the question and its solution. Write three hints of increasing detail:\n"
    "level_1: only the key idea or approach;\n"
    "level_2: more direction on the method or the intermediate steps;\n"
    "level_3: substantial guidance that still leaves the student to finish.\n"
    "Never state the final answer. Reply with a JSON object only:\n"
    '{"level_1": "...", "level_2": "...", "level_3": "..."}'
)
HINT_REQUEST = "Question:\n{question}\n\nSolution:\n{solution}\n"
HINT_TEMPLATE = "\n\nHere is a hint to help you:\n{hint}"
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def needs_hint(rewards: Sequence[float], threshold: float = 0.0) -> bool:
    """True when no rollout of the group has a reward above ``threshold`` (SAGE: any r > 0 resolves it).

    NaN rewards (not scored) count as failures; an empty group needs no hint (there is nothing to redo).
    """
    return bool(rewards) and not any(float(r) > threshold for r in rewards if not math.isnan(float(r)))


def solution_of(sample: Sample, solution_key: str = "solution") -> str | None:
    """The text the hints are written from: the ``solution_key`` column, else the reference answer(s)."""
    value = sample.meta.get(solution_key)
    if isinstance(value, str) and value.strip():
        return value.strip()
    answers = sample.answer if isinstance(sample.answer, (list, tuple)) else [sample.answer]
    text = "; ".join(str(a).strip() for a in answers if a is not None and str(a).strip())
    return text or None


def hint_request(sample: Sample, solution: str, max_chars: int = 4_000) -> Sample:
    """The text-only chat that asks the policy for the three hint levels of ``sample`` (its media left out)."""
    user = HINT_REQUEST.format(question=sample.prompt_text[:max_chars], solution=solution[:max_chars])
    return Sample(
        id=f"{sample.id}#hint",
        messages=[{"role": "system", "content": HINT_SYSTEM_PROMPT}, {"role": "user", "content": user}],
        task=sample.task,
    )


def _object(text: str) -> Any:
    """The JSON object in ``text``: a fenced block's, else from the first ``{`` to the last ``}``; None if none."""
    fenced = _FENCE.search(text)
    candidates = [fenced.group(1)] if fenced else []
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def parse_hints(text: str, levels: int = 3, max_chars: int = 2_000) -> list[str | None] | None:
    """``[h_1, ..., h_levels]`` from the model's reply (a level that is missing, empty or not text: None), or
    None when the reply holds no JSON object. Each hint is stripped and cut to ``max_chars``."""
    payload = _object(str(text)[:50_000])
    if not isinstance(payload, dict):
        return None
    out: list[str | None] = []
    for k in range(1, levels + 1):
        value = payload.get(f"level_{k}")
        out.append(value.strip()[:max_chars] if isinstance(value, str) and value.strip() else None)
    return out


def leaks_answer(hint: str, sample: Sample) -> bool:
    """Whether the hint states a reference answer (as a whole word, case-insensitive)."""
    return any(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", hint, re.IGNORECASE) for a in answer_strings(sample))


def hinted_sample(sample: Sample, hint: str, template: str = HINT_TEMPLATE) -> Sample:
    """A copy of ``sample`` whose last user turn ends with the hint (its media kept)."""
    return with_user_text(sample, template.replace("{hint}", hint), "hint")


# ---- inside a step ------------------------------------------------------------------------------------------


WriteHints = Callable[[Any, list[Drawn], int], list[Trajectory]]  # (run, hint requests, step) -> replies


def write_hints(run: Any, requests: list[Drawn], step: int) -> list[Trajectory]:
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
            settings=settings,
            seeds=[group_seed(run.cfg.seed, step, f"hint/{d.key}") for d in requests],
        )
    finally:
        model.train()


def regenerate(phases: StepPhases, got: Rollouts, *, write: WriteHints = write_hints) -> Rollouts:
    """``got`` after hinting the groups whose rollouts all fail, level by level, until a rollout succeeds.
    ``write(run, requests, step)`` samples the hint replies (``write_hints``)."""
    h, missing = phases.run.cfg.hint, phases.run.cfg.reward_missing

    def unresolved(current: Rollouts, slot: int) -> bool:
        totals = current.totals(missing)
        return needs_hint([totals[i] for i in current.group_rows().get(slot, [])], h.threshold)

    need = {d.slot: d for d in got.prompts if unresolved(got, d.slot)}
    hints = _hints(phases, list(need.values()), write) if need else {}
    metrics = {"hint/prompts_needing_hint": float(len(need)), "hint/prompts_with_hints": float(len(hints))}
    current = got
    for level in range(h.levels):

        def hinted(d: Drawn, rows: list[int], level: int = level, current: Rollouts = current) -> Sample | None:
            text = hints.get(d.slot, [None] * h.levels)[level]
            if d.slot not in need or text is None or not unresolved(current, d.slot):
                return None
            return hinted_sample(need[d.slot].prompt.sample, text)

        built = phases.rebuilt(current, hinted)
        out = phases.redone(current, built)
        metrics[f"hint/used_level_{level + 1}"] = float(len(built)) if out is not None else 0.0
        current = out if out is not None else current
    metrics["hint/resolved_after_hint"] = float(sum(not unresolved(current, slot) for slot in need))
    return current.with_metrics(metrics)


def _hints(phases: StepPhases, need: list[Drawn], write: WriteHints) -> dict[int, list[str | None]]:
    """Slot -> the parsed hint levels of each group that needs one (groups without a usable reply left out)."""
    run, h = phases.run, phases.run.cfg.hint
    requests = []
    for d in need:
        solution = solution_of(d.prompt.sample, h.solution_key)
        prompt = phases.prompt_of(run, hint_request(d.prompt.sample, solution)) if solution else None
        if prompt is not None:
            requests.append(Drawn(d.slot, d.index, prompt))
    sample_of = {d.slot: d.prompt.sample for d in need}
    out: dict[int, list[str | None]] = {}
    for t in write(run, requests, phases.step):
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
