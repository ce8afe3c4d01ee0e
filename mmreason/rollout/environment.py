"""The environment protocol for multi-turn tasks (tool calls, knowledge-base routing, ...).

The rollout engine calls ``reset(sample)`` once per trajectory, then ``step(action_text)`` after every
assistant turn. An observation is text and/or images or video frames; its tokens are never trained
(``action_mask`` 0). Model output is untrusted: environments parse and validate it, never eval it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from mmreason.types import Sample


@dataclass
class Observation:
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
