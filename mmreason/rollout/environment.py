"""The environment protocol for multi-turn tasks (tool calls, knowledge-base routing, ...): a public API.

The rollout engine builds one environment per episode (a pack's ``make_environment``, or the factory
``rollout.environment`` names: ``env_plugin.py``), calls ``reset(sample)`` once, then ``step(action_text)`` after
every assistant turn, a turn ending at EOS or at one of ``stop_strings``. The ``Observation`` it returns is shown
as the next user turn: its images, its video frames, then its text, encoded by the checkpoint's processor (images
over the run's ``max_pixels`` fitted into it first); its tokens are never trained (``action_mask`` 0). ``done``
ends the episode (the observation is then not shown); ``info`` is kept per turn as ``Trajectory.tool_calls`` and
``reward_info["observations"]``: facts for rewards. Model output is untrusted: environments parse and validate
it, never eval it. An exception in ``reset`` skips the sample (counted); one in ``step`` ends the episode as a
counted fault (``count/env_faults``). docs/extending.md "Write an environment" walks through one;
``tool_env.ToolEnvironment`` implements the protocol for environments made of tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mmreason.types import Sample


@dataclass
class Observation:
    """What the environment answers to one assistant turn (module doc)."""

    text: str = ""
    images: list[Any] = field(default_factory=list)  # PIL images (already within a pixel budget)
    videos: list[Any] = field(default_factory=list)  # frame tensors [T, 3, H, W]
    video_metadata: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # facts for rewards (parsed tool call, window, error)


@runtime_checkable
class Environment(Protocol):
    stop_strings: tuple[str, ...]  # an assistant turn ends at one of these (or at EOS)

    def reset(self, sample: Sample) -> None: ...

    def step(self, action_text: str) -> Observation: ...
