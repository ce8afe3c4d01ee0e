"""iGRPO (arXiv 2602.09000): each prompt is rolled out again with its best draft appended; train on those.

Source: "iGRPO: Self-Feedback-Driven LLM Reasoning" (Hatamizadeh et al., arXiv 2602.09000); our reading of the
method as its abstract states it (no released code was found):

    Stage 1   sample G drafts y_1..y_G of prompt x (no gradient) and score them with the training reward r
    select    k* = argmax_i r(y_i)                      (ties: the first; rows whose reward is NaN never win)
    Stage 2   x' = x  ⊕  template(y_k*)                 the best draft appended to the prompt's last user turn
              sample G refinements of x', score them with r, and train on them with the configured estimator
              and loss (GRPO: A_i = (r_i - mean r) / (std r + eps) within the refinement group)

Choices the abstract leaves open, named in docs/methods/within-step.md#refine: the wording that introduces the draft
(``DEFAULT_TEMPLATE``), a cap on the draft's length (``max_draft_chars``, the draft's start is kept), and the
budget (G drafts + G refinements per prompt: twice GRPO's rollouts, where the paper matches budgets).

Inside a step (``regenerate``): the scored groups are the drafts; a group whose draft rewards are all NaN, or
whose refinement prompt cannot be built (too long, broken media), keeps its drafts (``refine/kept_drafts``).
Refinements roll out under the group's own seed, like every regenerated group.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from mmreason.sampling.records import Drawn, Rollouts
from mmreason.sampling.within_step import StepPhases
from mmreason.types import Sample

DEFAULT_TEMPLATE = "\nHere is a previous attempt at this question:\n{draft}\nImprove on it and give your final answer."


def best_draft(rewards: Sequence[float], completions: Sequence[str]) -> int | None:
    """Index of the highest-reward draft (the first on ties), or None when no reward is a number.

    ``rewards`` [G] the drafts' total rewards (NaN: not scored), ``completions`` [G] their texts.
    """
    if len(rewards) != len(completions):
        raise ValueError(f"best_draft: {len(rewards)} rewards for {len(completions)} completions")
    scored = [i for i, r in enumerate(rewards) if not math.isnan(float(r))]
    if not scored:
        return None
    return max(scored, key=lambda i: (float(rewards[i]), -i))


def refinement_sample(
    sample: Sample, draft: str, template: str = DEFAULT_TEMPLATE, max_draft_chars: int = 4_000
) -> Sample:
    """A copy of ``sample`` whose last user turn ends with ``template`` filled with the (capped) draft."""
    if "{draft}" not in template:
        raise ValueError("refine.template must contain {draft}")
    text = template.replace("{draft}", str(draft)[: max(0, max_draft_chars)].strip())
    return with_user_text(sample, text, "draft")


def with_user_text(sample: Sample, text: str, what: str) -> Sample:
    """A copy of ``sample`` whose last user turn ends with ``text`` (its media kept); ``what`` names the text
    in the error raised when the sample has no user turn."""
    messages = [dict(m) for m in sample.messages]
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = content + text
        else:
            message["content"] = [*(content or []), {"type": "text", "text": text}]
        return dataclasses.replace(sample, messages=messages)
    raise ValueError(f"sample {sample.id!r}: no user turn to append the {what} to")


def regenerate(phases: StepPhases, got: Rollouts) -> Rollouts:
    """``got`` with every refinable group's drafts replaced by the refinements of its best draft."""
    cfg = phases.run.cfg.refine
    total = got.totals(phases.run.cfg.reward_missing)  # [N]
    best: dict[int, float] = {}

    def refinement(d: Drawn, rows: list[int]) -> Sample | None:
        k = best_draft([total[i] for i in rows], [got.trajectories[i].completion_text for i in rows]) if rows else None
        if k is None:
            return None
        best[d.slot] = total[rows[k]]
        draft = got.trajectories[rows[k]].completion_text
        return refinement_sample(d.prompt.sample, draft, cfg.template, cfg.max_draft_chars)

    built = phases.rebuilt(got, refinement)
    best_rewards = [best[d.slot] for d in built]
    drafts = [x for x in total if not math.isnan(x)]
    out = phases.redone(got, built)
    return (out if out is not None else got).with_metrics(
        {
            "refine/draft_reward_mean": math.fsum(drafts) / len(drafts) if drafts else 0.0,
            "refine/best_draft_reward_mean": math.fsum(best_rewards) / len(best_rewards) if best_rewards else 0.0,
            "refine/kept_drafts": float(len(got.prompts) - (len(built) if out is not None else 0)),
        }
    )
