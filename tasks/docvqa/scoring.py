"""DocVQA / InfographicVQA's ANLS (Biten et al., ICCV 2019; the RRC evaluation and lmms-eval's ``anls``): per
reference NL = edit distance / the longer length, on lower-cased, whitespace-collapsed strings; the score is
1 - the smallest NL over the references, 0 when that NL is 0.5 or more (``rewards.benchmark_rules.docvqa_anls``, the
shared edit distance). ANLS overall and per ``question_types`` (DocVQA), ``answer_type`` and
``operation/reasoning`` (InfographicVQA), where the file has them.
"""

from __future__ import annotations

from typing import Any

from mmreason.eval.breakdown import group_metrics, once_per_doc
from mmreason.parsing import final_answer
from mmreason.rewarding import per_sample
from mmreason.rewards.accuracy import references
from mmreason.rewards.benchmark_rules import docvqa_anls
from mmreason.tasks.docvqa.data import LIST_FIELDS
from mmreason.types import Sample


def _anls(sample: Sample, completion: str) -> float:
    """DocVQA's ANLS of the answer: 1 - normalized edit distance to the closest reference, 0 at NL >= 0.5."""
    return docvqa_anls(final_answer(completion, max_chars=1_000), references(sample.answer))


docvqa_anls_metric = once_per_doc(_anls)
docvqa_anls_metric.__name__ = docvqa_anls_metric.__qualname__ = "docvqa_anls"


def docvqa_breakdowns(samples: list[Sample]) -> dict[str, Any]:
    """ANLS per question type / answer type / operation, where the rows have them."""
    return group_metrics(samples, LIST_FIELDS, docvqa_anls_metric, prefix="anls")


@per_sample
def docvqa_reward(sample, trajectory) -> float:
    """DocVQA's ANLS of the answer (threshold 0.5)."""
    return _anls(sample, trajectory.completion_text)
