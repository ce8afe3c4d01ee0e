"""Scoring of the vision pack: one accuracy rule per answer type, used as a reward and as eval metrics.

    yes/no     the answer's yes/no (``yes_no_of``) equals the reference's
    numeric    the answer's number equals the reference within rel_tol 1e-4 (``number_of``)
    mcq        the extracted option letter (``extract_choice``) equals the reference letter
    free-form  VQA-normalised exact match (case, punctuation, articles, number words)

The answer is read with the shared ``final_answer`` parser. A sample whose prompt asked for the
think/answer format (``answer_format: think``) is scored on the body of its last closed ``<answer>``
tag only: without one it scores 0, so a policy cannot earn reward with broken output that merely
contains the right word (GRPO on a small model drifts there within tens of steps otherwise). Plain
samples take the last ``<answer>`` body, else ``\\boxed{}``, else the whole completion.
"""

from __future__ import annotations

import math

from mmreason.parsing import final_answer, parse_number
from mmreason.rewarding import per_sample
from mmreason.rewards.accuracy import number_of, yes_no_of
from mmreason.rewards.choice import extract_choice, gold_letter
from mmreason.rewards.format import think_answer_bodies
from mmreason.rewards.textmatch import vqa_normalize
from mmreason.tasks.vision.rewards import skip_ratio
from mmreason.types import Sample

DOMAINS = ("perception", "chart", "reasoning")


def is_correct(sample: Sample, completion: str) -> float:
    """1.0 / 0.0: the completion's final answer matches ``sample.answer`` under its answer type's rule."""
    kind = sample.meta.get("answer_type", "free-form")
    ref = str(sample.answer)
    strict = sample.meta.get("answer_format") == "think"
    pred = final_answer(completion, mode="answer_tag" if strict else "auto")
    if kind == "yes/no":
        return float(yes_no_of(pred) == ref.strip().lower())
    if kind == "numeric":
        gold, said = parse_number(ref), number_of(pred)
        return float(gold is not None and said is not None and math.isclose(said, gold, rel_tol=1e-4, abs_tol=1e-9))
    if kind == "mcq":
        choices = sample.meta.get("choices")
        gold_choice = gold_letter(ref, choices)
        return float(gold_choice is not None and extract_choice(pred, choices) == gold_choice)
    return float(vqa_normalize(pred) == vqa_normalize(ref))


@per_sample
def vision_accuracy(sample, trajectory) -> float:
    """Answer accuracy by the sample's answer_type (yes/no, numeric, mcq, free-form VQA match): 1 or 0."""
    return is_correct(sample, trajectory.completion_text)


# ---- eval metrics: fn(sample, completion) -> float (NaN = does not apply, left out of the mean) ----


def vision_metric_accuracy(sample: Sample, completion: str) -> float:
    """Answer accuracy (rule by answer_type)."""
    return is_correct(sample, completion)


def vision_metric_skip_think(sample: Sample, completion: str) -> float:
    """1 if the completion's think block is empty or whitespace: its mean is TON's skip-think ratio."""
    return skip_ratio([completion])


def vision_metric_think_format(sample: Sample, completion: str) -> float:
    """1 if the completion is exactly <think>...</think><answer>...</answer> (empty thought allowed)."""
    return float(think_answer_bodies(completion) is not None)


def domain_accuracy(domain: str):
    """Accuracy on ``domain`` only (NaN on other domains, so the mean is the per-domain accuracy)."""

    def metric(sample: Sample, completion: str) -> float:
        if sample.meta.get("domain") != domain:
            return float("nan")
        return is_correct(sample, completion)

    metric.__name__ = metric.__qualname__ = f"vision_metric_accuracy_{domain}"
    metric.__doc__ = f"Answer accuracy on the {domain} domain."
    return metric


METRICS = {
    "accuracy": vision_metric_accuracy,
    **{f"accuracy_{d}": domain_accuracy(d) for d in DOMAINS},
    "skip_think": vision_metric_skip_think,
    "think_format": vision_metric_think_format,
}
