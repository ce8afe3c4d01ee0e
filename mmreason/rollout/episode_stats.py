"""What the model did with its tools in a step's episodes, from each observation's ``info`` (``tool_env.py``):
calls that ran (``name``), bad calls (``error``: unreadable, unknown tool, off-schema, refused, over budget) and
the images the tools returned. Logged per step as ``env/*``; bad calls are also counted over the run
(``count/bad_tool_calls``)."""

from __future__ import annotations

import torch

from mmreason.types import Trajectory


def _infos(t: Trajectory) -> list[dict]:
    return [i for i in (t.reward_info.get("observations") or []) if isinstance(i, dict)]


def bad_calls(t: Trajectory) -> int:
    """Return the episode's calls that did not run and got an error observation instead."""
    return sum(1 for i in _infos(t) if "error" in i)


def tool_stats(trajectories: list[Trajectory]) -> dict[str, float]:
    """Report per step: ``env/tool_calls`` and ``env/tool_images`` (mean per episode), ``env/bad_tool_calls`` (total),
    ``env/episodes_with_call`` (share of episodes where a call ran); empty without episodes."""
    episodes = [t for t in trajectories if "observations" in t.reward_info]
    if not episodes:
        return {}
    ran = [sum(1 for i in _infos(t) if "name" in i and "error" not in i) for t in episodes]
    images = [sum(int(i.get("images", 0) or 0) for i in _infos(t) if "error" not in i) for t in episodes]
    return {
        "env/tool_calls": sum(ran) / len(episodes),
        "env/tool_images": sum(images) / len(episodes),
        "env/bad_tool_calls": float(sum(bad_calls(t) for t in episodes)),
        "env/episodes_with_call": sum(1 for n in ran if n) / len(episodes),
    }


def after_media(t: Trajectory) -> torch.Tensor:
    """Mark [T] bool the tokens of the assistant turns that follow an observation which showed images or video frames
    (visual tokens in its span). There a sampler that dropped or misplaced the observation's media would part from
    the trainer. All False for a single-turn trajectory."""
    out = torch.zeros(t.token_ids.numel(), dtype=torch.bool)
    types = t.mm_token_type_ids
    if types is None:
        return out
    shown = False
    for turn in t.turns:
        if turn.role == "observation":
            shown = bool((types[turn.start : turn.end] > 0).any())
        elif shown:
            out[turn.start : turn.end] = True
    return out
