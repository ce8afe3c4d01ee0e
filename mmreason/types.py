"""The typed records that travel along the one flow: Sample -> Trajectory -> rewards -> advantages.

Shape letters: N trajectories, K reward components, T tokens, G rollouts per prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch


@dataclass
class VideoRef:
    """A video and how to sample it: a time window in seconds and either fps or a fixed frame count, and optional
    seeded frame noise (``noise_std`` > 0, added after decoding)."""

    path: str
    start: float | None = None
    end: float | None = None
    fps: float | None = None
    num_frames: int | None = None
    noise_std: float = 0.0  # Gaussian noise on the decoded frames, [0, 1] pixel units (difficulty augmentation)
    noise_seed: int = 0


@dataclass
class PageRef:
    """One document page: a page of a PDF (0-based index) or an image file standing for a page."""

    source: str
    index: int = 0
    max_pixels: int | None = None  # per-page pixel budget chosen by resolution allocation


@dataclass
class Sample:
    """One task example.

    ``messages`` is a chat in the Hugging Face format whose user turn names its media with
    ``{"type": "image"}`` / ``{"type": "video"}`` items, in the order of ``images`` / ``videos`` / ``pages``.
    ``answer`` is the reference; ``meta`` holds every other dataset column (evidence pages, spans,
    knowledge-base targets, domain, ...) and is passed to reward functions as keyword columns.
    """

    id: str
    messages: list[dict[str, Any]]
    answer: Any = None
    images: list[Any] = field(default_factory=list)  # paths, bytes or PIL images
    videos: list[VideoRef] = field(default_factory=list)
    pages: list[PageRef] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    task: str = ""
    # the tool schemas the chat template shows (``tools=``): an attached environment's (rollout/env_plugin.py)
    tools: list[dict[str, Any]] = field(default_factory=list)

    @property
    def prompt_text(self) -> str:
        """The text of the last user turn (for rewards that compare against the question)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, str):
                    return content
                return "".join(item.get("text", "") for item in content if item.get("type") == "text")
        return ""


@dataclass
class Turn:
    """One span of a trajectory: an assistant action (trained) or an observation (never trained)."""

    role: str  # "assistant" | "observation"
    text: str
    start: int  # token offset in Trajectory.token_ids
    end: int


# Why an episode stopped before the model or its environment ended it (``rollout/multiturn.py``).
EndReason = Literal["environment error", "unseen media", "observation too long", "context full"]


@dataclass(frozen=True)
class EpisodeEnd:
    """An episode cut short: ``reason`` says which way, ``detail`` the particulars (the exception, the counts).
    ``environment error`` (the environment raised or ran past its time limit) is a fault the trainer counts;
    the others are limits. ``str()`` is the line logs and samples files show: ``"<reason>: <detail>"``."""

    reason: EndReason
    detail: str

    @property
    def fault(self) -> bool:
        return self.reason == "environment error"

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}"


@dataclass
class Trajectory:
    """One model attempt at a Sample.

    token_ids:   [T] prompt + every turn, as fed to the model.
    action_mask: [T] 1 where the model produced the token and it is trained; 0 for prompt,
                 observations, retrieved passages and padding.
    mm_token_type_ids: [T] 0 text / 1 image / 2 video, as the processor returns them (Qwen M-RoPE).
    visual:      the processor's visual tensors for every image/video in token order: the prompt's
                 (shared, not copied, by the G rollouts of a group) then each observation's.
    completion_text: what rewards score: the model's own text. In a multi-turn trajectory each observation
                 stands as an empty ``<observation></observation>`` marker, so text an environment returned
                 (a retrieved passage that holds the answer) can never be scored as the model's;
                 ``transcript`` has the observations in full, for logs.
    """

    sample_id: str
    group_id: int
    token_ids: torch.Tensor
    action_mask: torch.Tensor
    prompt_length: int
    completion_text: str
    truncated: bool = False
    turns: list[Turn] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    mm_token_type_ids: torch.Tensor | None = None
    visual: list[dict[str, torch.Tensor]] = field(default_factory=list)
    reward_info: dict[str, Any] = field(default_factory=dict)  # environment facts for rewards (e.g. tool windows)
    # [T] the sampler's log-prob of each sampled token (0 elsewhere), when the rollout backend returns them (vLLM)
    rollout_logprobs: torch.Tensor | None = None
    end: EpisodeEnd | None = None  # a multi-turn episode cut short
    env_seconds: float | None = None  # time its environment steps took; None outside multi-turn episodes
    # an observation's media that would not have reached the model (rollout/visibility.py): the report to dump
    unseen_media: dict[str, Any] | None = None
    # the policy version that sampled it (asynchronous generation, train/async_rollouts.py): the step whose
    # update the engine's weights ended with; None when generated in step with the update
    policy_version: int | None = None
    # [T] the policy version that sampled each token (-1 where nothing was sampled: prompt, observations); an
    # asynchronous episode continues across a weight push at its next turn, so its turns may differ. None when
    # generated in step with the update
    token_versions: torch.Tensor | None = None

    @property
    def completion_length(self) -> int:
        return int(self.action_mask.sum())

    @property
    def transcript(self) -> str:
        """The completion with each observation's text in full (for logs; rewards read ``completion_text``)."""
        if not any(t.role == "observation" for t in self.turns):
            return self.completion_text
        return "".join(
            t.text if t.role == "assistant" else f"\n<observation>{t.text}</observation>\n" for t in self.turns
        )
