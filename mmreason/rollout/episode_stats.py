"""What the model did with its tools in a step's episodes, from each observation's ``info`` (``tool_env.py``):
calls that ran (``name``), bad calls (``error``: unreadable, unknown tool, off-schema, refused, over budget) and
the images the tools returned. Logged per step as ``env/*``; bad calls are also counted over the run
(``count/bad_tool_calls``)."""

from __future__ import annotations

from mmreason.types import Trajectory


def _infos(t: Trajectory) -> list[dict]:
    return [i for i in (t.reward_info.get("observations") or []) if isinstance(i, dict)]


def bad_calls(t: Trajectory) -> int:
    """The episode's calls that did not run and got an error observation instead."""
    return sum(1 for i in _infos(t) if "error" in i)


def tool_stats(trajectories: list[Trajectory]) -> dict[str, float]:
    """Per step: ``env/tool_calls`` and ``env/tool_images`` (mean per episode), ``env/bad_tool_calls`` (total),
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
