"""Eval metrics of the mrag pack, per sample (the harness takes the mean; NaN = does not apply).

On unrolled step samples (the default):
  answer_em / answer_f1      final steps: VQA-normalised exact match / token F1 of the ``<answer>`` body;
  routing_accuracy           every step: the decision matches the gold one (the single gold KB on a
                             retrieval step, answering on the final step); ``routing_accuracy_step{k}``
                             per step k = 1..MAX_REPORTED_STEPS;
  retrieval_call_rate        every step: the output calls a retriever (a KB other than None);
  answered_without_retrieval first step: the model answers at once (or routes to None).
On episode samples (``unrolled: false``; the completion is the whole transcript of an online episode):
  answer_em / answer_f1 on the last ``<answer>``, retrieval_calls (calls in the transcript) and
  answered_without_retrieval (an answer with no call).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mmreason.parsing import MAX_CHARS, all_tag_bodies, as_text
from mmreason.rewards.textmatch import token_f1, vqa_normalize
from mmreason.tasks.mrag.route import KNOWLEDGE_BASES, parse_route_step
from mmreason.types import Sample

NAN = math.nan
MAX_REPORTED_STEPS = 3
NONE_KB = KNOWLEDGE_BASES[-1]


def _text(completion: str) -> str:
    return as_text(completion)[:MAX_CHARS]


def decision(completion: str) -> str | None:
    """ "answer", a KB name, or None (the step does not parse)."""
    step = parse_route_step(_text(completion).strip())
    if step is None:
        return None
    return "answer" if step.answer is not None else step.knowledge_base


def final_answer_of(sample: Sample, completion: str) -> str | None:
    if sample.meta.get("step_type") == "episode":
        bodies = all_tag_bodies(_text(completion), "answer")
        return bodies[-1].strip() if bodies else None
    step = parse_route_step(_text(completion).strip())
    return step.answer if step is not None else None


def _answer_applies(sample: Sample) -> bool:
    return sample.meta.get("step_type") in ("ans", "episode")


def answer_em(sample: Sample, completion: str) -> float:
    """Final steps: the answer equals the gold after VQA normalisation."""
    if not _answer_applies(sample):
        return NAN
    answer = final_answer_of(sample, completion)
    return float(answer is not None and vqa_normalize(answer) == vqa_normalize(str(sample.answer)))


def answer_f1(sample: Sample, completion: str) -> float:
    """Final steps: token F1 of the answer against the gold (VQA-normalised)."""
    if not _answer_applies(sample):
        return NAN
    answer = final_answer_of(sample, completion)
    return 0.0 if answer is None else token_f1(vqa_normalize(answer), vqa_normalize(str(sample.answer)))


def gold_decision(sample: Sample) -> str | None:
    kind = sample.meta.get("step_type")
    if kind == "ans":
        return "answer"
    if kind == "ret":
        return str(sample.meta.get("knowledge_base"))
    return None


def routing_accuracy(sample: Sample, completion: str) -> float:
    """Step samples: the step's decision (one KB, or answering) is the gold one."""
    gold = gold_decision(sample)
    return NAN if gold is None else float(decision(completion) == gold)


def routing_at(k: int) -> Callable[[Sample, str], float]:
    def metric(sample: Sample, completion: str) -> float:
        if sample.meta.get("step_index") != k - 1:
            return NAN
        return routing_accuracy(sample, completion)

    metric.__name__ = metric.__qualname__ = f"routing_accuracy_step{k}"
    metric.__doc__ = f"Step {k} only: the step's decision is the gold one."
    return metric


def retrieval_call_rate(sample: Sample, completion: str) -> float:
    """Step samples: the output asks a knowledge base (one KB other than None)."""
    if gold_decision(sample) is None:
        return NAN
    return float(decision(completion) in KNOWLEDGE_BASES[:-1])


def retrieval_calls(sample: Sample, completion: str) -> float:
    """Episode samples: retriever calls in the transcript (``<ret>`` bodies other than None)."""
    if sample.meta.get("step_type") != "episode":
        return NAN
    return float(sum(b.strip() != NONE_KB for b in all_tag_bodies(_text(completion), "ret")))


def answered_without_retrieval(sample: Sample, completion: str) -> float:
    """The question was answered with no retriever call (episode), or step 1 answers at once (steps)."""
    kind = sample.meta.get("step_type")
    if kind == "episode":
        return float(final_answer_of(sample, completion) is not None and retrieval_calls(sample, completion) == 0)
    if sample.meta.get("step_index") != 0:
        return NAN
    return float(decision(completion) in ("answer", NONE_KB))


def mrag_metrics() -> dict[str, Callable[[Sample, str], float]]:
    metrics = {"answer_em": answer_em, "answer_f1": answer_f1, "routing_accuracy": routing_accuracy}
    metrics.update({f"routing_accuracy_step{k}": routing_at(k) for k in range(1, MAX_REPORTED_STEPS + 1)})
    metrics.update(
        {
            "retrieval_call_rate": retrieval_call_rate,
            "retrieval_calls": retrieval_calls,
            "answered_without_retrieval": answered_without_retrieval,
        }
    )
    return metrics


HIGHER_IS_BETTER = {"retrieval_call_rate": False, "retrieval_calls": False}
