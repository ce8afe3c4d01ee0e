"""Why an episode ended is a typed record (``EpisodeEnd``: a reason from a closed set, and its detail), read by
the trainer's fault and limit counts; ``str(end)`` is the text logs show."""

from __future__ import annotations

import typing

import torch

from mmreason.rollout.environment import Observation
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.multiturn import EpisodeStart, ended_by_fault, ended_by_limit, run_episodes
from mmreason.rollout.prompts import build_prompt
from mmreason.types import EndReason, EpisodeEnd, Sample, Trajectory


def _trajectory(end: EpisodeEnd | None) -> Trajectory:
    ids = torch.tensor([1, 2, 3])
    return Trajectory("s", 0, ids, torch.tensor([0, 1, 1]), 1, "x", end=end)


def test_fault_and_limit_are_read_from_the_reason_not_from_text():
    assert typing.get_args(EndReason) == ("environment error", "unseen media", "observation too long", "context full")
    crash = EpisodeEnd("environment error", "RuntimeError: a detail that says context full")
    assert str(crash) == "environment error: RuntimeError: a detail that says context full"
    assert ended_by_fault(_trajectory(crash)) and not ended_by_limit(_trajectory(crash))
    for reason in ("unseen media", "observation too long", "context full"):
        cut = _trajectory(EpisodeEnd(reason, "environment error in the detail does not make it a fault"))
        assert ended_by_limit(cut) and not ended_by_fault(cut)
    assert not ended_by_fault(_trajectory(None)) and not ended_by_limit(_trajectory(None))


class _CrashingEnv:
    def reset(self, sample: Sample) -> None:
        pass

    def step(self, action_text: str) -> Observation:
        raise KeyError("no such tool")


def test_an_episode_records_its_end_as_a_record_and_as_text(tiny):
    model, processor = tiny
    sample = Sample(id="end-0", messages=[{"role": "user", "content": "Say hi."}], answer="hi", images=[])
    prompt = build_prompt(processor, sample, max_prompt_length=512)
    (t,) = run_episodes(
        model,
        processor,
        [EpisodeStart(prompt, _CrashingEnv(), group_id=0)],
        GenerationSettings(max_new_tokens=3),
        max_turns=2,
        max_context=1024,
        seed=0,
        step=0,
    )
    assert isinstance(t, Trajectory) and t.end == EpisodeEnd("environment error", "KeyError: 'no such tool'")
    assert str(t.end) == "environment error: KeyError: 'no such tool'" and ended_by_fault(t)
