"""Shared pieces of the DocSeeker tests: trajectories from text, the pack's reward runner, small documents."""

from __future__ import annotations

from pathlib import Path

import torch

from mmreason.rewarding import RewardRunner, RewardSpec
from mmreason.tasks.docseeker import REWARDS
from mmreason.tasks.docseeker.alr import alr_text
from mmreason.types import Trajectory


def traj(text: str, sample_id: str) -> Trajectory:
    return Trajectory(
        sample_id=sample_id,
        group_id=0,
        token_ids=torch.zeros(4, dtype=torch.long),
        action_mask=torch.ones(4, dtype=torch.long),
        prompt_length=0,
        completion_text=text,
    )


def pack_runner() -> RewardRunner:
    """The pack's default rewards, as the trainer builds them when a config names none."""
    specs = [RewardSpec(r["name"], weight=r["weight"], kwargs=dict(r.get("kwargs", {}))) for r in REWARDS]
    return RewardRunner(specs, timeout_s=None)


def completion(pages: list[int], answer: str, reasoning_header: bool = True) -> str:
    text = alr_text(
        "The question asks for a value.", "It is on the cited page.", "So the answer follows.", pages, answer
    )
    return text if reasoning_header else text.replace(r"\boxed{Reasoning Process}", "")


KNOWN_PDFS = (
    "/usr/share/R/doc/manual/R-data.pdf",
    "/usr/share/R/doc/manual/R-lang.pdf",
    "/usr/share/R/doc/manual/R-intro.pdf",
    "/usr/share/debian-reference/debian-reference.en.pdf",
)


def installed_pdfs() -> list[str]:
    """The known real manuals present on this machine."""
    return [p for p in KNOWN_PDFS if Path(p).is_file()]
