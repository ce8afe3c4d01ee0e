"""The generic pack's rewards: accuracy by each row's answer kind, and the prompt template's format.

``generic_accuracy`` hands each row to the shared reward its answer kind names (``answers.REWARD_OF_KIND``:
``mcq``, ``numeric``, ``math``, ``vqa_exact``, ``anls``), so the rules live in one place (``rewards/``).
``generic_format`` is EasyR1's format reward for the template the prompt asked for: ``think_boxed`` needs
``<think>...</think>`` then a ``\\boxed{}``; ``think_answer`` exactly ``<think>...</think><answer>...</answer>``;
a plain template asks for no format (None: the reward does not apply).
"""

from __future__ import annotations

import re

from mmreason.rewarding import per_sample
from mmreason.rewards.accuracy import anls, numeric, vqa_exact
from mmreason.rewards.choice import mcq
from mmreason.rewards.format import think_answer_bodies
from mmreason.rewards.mathverify import math_reward
from mmreason.tasks.generic.answers import kind_of
from mmreason.types import Sample, Trajectory

HERE = "mmreason.tasks.generic.rewards"
# The format reward weighs 0.1, as EasyR1's recipes weigh theirs.
REWARDS = [{"name": f"{HERE}:generic_accuracy", "weight": 1.0}, {"name": f"{HERE}:generic_format", "weight": 0.1}]

_THINK_BOXED = re.compile(r"\s*<think>(?:(?!</?think>).)*</think>(?:(?!<think>).)*\\boxed\{.*\}.*", re.DOTALL)
MAX_FORMAT_CHARS = 20_000


def accuracy_of(
    sample: Sample, trajectory: Trajectory, *, rel_tol: float = 1e-4, anls_threshold: float = 0.5
) -> float | None:
    """The score of the shared reward the sample's answer kind names (None when it does not apply)."""
    kind = sample.meta.get("answer_kind") or kind_of(sample.answer, choices=sample.meta.get("choices"))
    one, traj = [sample], [trajectory]
    if kind == "mcq":
        return mcq(one, traj)["accuracy"][0]
    if kind == "numeric":
        return numeric(one, traj, rel_tol=rel_tol)[0]
    if kind == "math":
        return math_reward(one, traj)[0]
    if kind == "anls":
        return anls(one, traj, threshold=anls_threshold)[0]
    return vqa_exact(one, traj)[0]


@per_sample
def generic_accuracy(
    sample: Sample, trajectory: Trajectory, *, rel_tol: float = 1e-4, anls_threshold: float = 0.5
) -> float | None:
    """Answer accuracy by the row's answer kind: option letter (mcq), number (rel_tol), math-verify, VQA exact
    match, or ANLS (0 below anls_threshold) for long text."""
    return accuracy_of(sample, trajectory, rel_tol=rel_tol, anls_threshold=anls_threshold)


def format_of(sample: Sample, text: str) -> float | None:
    style = sample.meta.get("answer_format", "plain")
    if style == "plain":
        return None
    if len(text) > MAX_FORMAT_CHARS:
        return 0.0
    if style == "think_boxed":
        return float(_THINK_BOXED.fullmatch(text) is not None)
    return float(think_answer_bodies(text) is not None)


@per_sample
def generic_format(sample: Sample, trajectory: Trajectory) -> float | None:
    """1 if the completion follows the prompt template's answer format (think_boxed / think_answer); None for
    a plain template."""
    return format_of(sample, trajectory.completion_text)
