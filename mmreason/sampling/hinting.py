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

This module holds the pure parts (which groups need a hint, the hint request, parsing the model's untrusted
reply, the hinted prompt); ``mmreason/train/hinting.py`` runs them inside a step. Choices and differences:
docs/algorithms.md §12.2.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from mmreason.sampling.refine import with_user_text
from mmreason.types import Sample

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
    from mmreason.sampling.difficulty import answer_strings

    return any(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", hint, re.IGNORECASE) for a in answer_strings(sample))


def hinted_sample(sample: Sample, hint: str, template: str = HINT_TEMPLATE) -> Sample:
    """A copy of ``sample`` whose last user turn ends with the hint (its media kept)."""
    return with_user_text(sample, template.replace("{hint}", hint), "hint")
