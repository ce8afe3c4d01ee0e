"""Building samples and trajectories for reward tests, and scoring one example through the registry."""

from __future__ import annotations

from typing import Any

import torch

from mmreason.rewarding import REWARDS
from mmreason.types import Sample, Trajectory


def sample(
    answer: Any = None,
    *,
    id: str = "s0",
    prompt: str = "What is shown?",
    images=(),
    videos=(),
    task: str = "",
    **meta: Any,
) -> Sample:
    content = [{"type": "image"} for _ in images] + [{"type": "text", "text": prompt}]
    return Sample(
        id=id,
        messages=[{"role": "user", "content": content}],
        answer=answer,
        images=list(images),
        videos=list(videos),
        meta=meta,
        task=task,
    )


def traj(text: Any, *, sample_id: str = "s0", length: int = 4, turns=(), tool_calls=()) -> Trajectory:
    return Trajectory(
        sample_id=sample_id,
        group_id=0,
        token_ids=torch.zeros(length, dtype=torch.long),
        action_mask=torch.ones(length, dtype=torch.long),
        prompt_length=0,
        completion_text=text,
        turns=list(turns),
        tool_calls=list(tool_calls),
    )


def score(name: str, text: Any, answer: Any = None, *, kwargs: dict | None = None, length: int = 4, **meta: Any) -> Any:
    """The registered reward ``name`` on one (sample, completion): a value, or a dict of values."""
    out = REWARDS.get(name)([sample(answer, **meta)], [traj(text, length=length)], **(kwargs or {}))
    if isinstance(out, dict):
        return {k: v[0] for k, v in out.items()}
    return out[0]
