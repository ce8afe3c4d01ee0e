"""Eval metrics of the generic pack: the training rewards' per-row rules on a completion.

``accuracy`` scores as ``generic_accuracy`` does (the row's answer kind picks the rule); ``format`` as
``generic_format`` (NaN for a plain template: left out of the mean). ``--task_args group_by=COLUMN`` breaks both
down by any categorical column (the harness, ``mmreason.eval.tasks``).
"""

from __future__ import annotations

import math

from mmreason.tasks.generic.rewards import accuracy_of, format_of
from mmreason.types import Sample, Trajectory


def _trajectory(text: str) -> Trajectory:
    import torch

    return Trajectory(
        sample_id="",
        group_id=0,
        token_ids=torch.zeros(0, dtype=torch.long),
        action_mask=torch.zeros(0, dtype=torch.long),
        prompt_length=0,
        completion_text=text,
    )


def metric_accuracy(sample: Sample, completion: str) -> float:
    """Answer accuracy by the row's answer kind (mcq letter, number, math-verify, VQA exact, ANLS)."""
    score = accuracy_of(sample, _trajectory(completion))
    return math.nan if score is None else float(score)


def metric_format(sample: Sample, completion: str) -> float:
    """1 if the completion follows the prompt template's answer format (NaN for a plain template)."""
    score = format_of(sample, completion)
    return math.nan if score is None else float(score)
