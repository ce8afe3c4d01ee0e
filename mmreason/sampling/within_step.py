"""What every within-step method shares (``WITHIN_STEP``, by ``within_step.name``: refine.py, hinting.py, difficulty.py, anchors.py).

A within-step method reads a step's scored groups and may redo some of them before the update: each is one
function ``regenerate(phases: StepPhases, got: Rollouts) -> Rollouts``. ``StepPhases`` hands it the step's own
phases, under the names and signatures the step uses (``prompt_of``, ``roll_out``, ``score``; timed and guarded
by the step), so a redone group is built, sampled and scored exactly as a drawn one. A method says which groups
to redo and from what sample (``rebuilt``); ``redone`` rolls them out, scores them and puts them in place of
their own (``records.merge_groups``, the one merge of regenerated groups).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mmreason.rewarding.records import RewardBatch
from mmreason.rollout.prompts import PromptInputs
from mmreason.sampling.records import Drawn, Rollouts, merge_groups
from mmreason.types import Sample, Trajectory


class PromptOf(Protocol):
    def __call__(self, run: Any, sample: Sample, /) -> PromptInputs | None: ...


class RollOut(Protocol):
    def __call__(self, run: Any, drawn: list[Drawn], step: int, /) -> list[Trajectory]: ...


class Score(Protocol):
    def __call__(
        self, run: Any, drawn: list[Drawn], trajectories: list[Trajectory], /
    ) -> tuple[list[Sample], RewardBatch]: ...


@dataclass(frozen=True)
class StepPhases:
    """The step a within-step method runs in: the trainer's ``Run`` (mmreason/train/setup.py; typed ``Any`` here,
    as this room sits below the trainer), the step number, and the step's phases.

    ``prompt_of(run, sample)`` builds one prompt (None: it cannot be, counted by the step); ``roll_out(run,
    drawn, step)`` samples G trajectories per prompt; ``score(run, drawn, trajectories)`` gives their samples
    and rewards ``[N, K]``."""

    run: Any
    step: int
    prompt_of: PromptOf
    roll_out: RollOut
    score: Score

    def rebuilt(self, got: Rollouts, sample_of: Callable[[Drawn, list[int]], Sample | None]) -> list[Drawn]:
        """The groups of ``got`` to redo: each prompt for which ``sample_of(drawn, its rows)`` gives a sample, with
        that sample's prompt in the same slot (one whose prompt cannot be built is left out), in ``got``'s order."""
        rows = got.group_rows()
        out = []
        for d in got.prompts:
            sample = sample_of(d, rows.get(d.slot, []))
            prompt = self.prompt_of(self.run, sample) if sample is not None else None
            if prompt is not None:
                out.append(Drawn(d.slot, d.index, prompt))
        return out

    def redone(self, got: Rollouts, drawn: list[Drawn]) -> Rollouts | None:
        """``got`` with the ``drawn`` groups rolled out, scored and in place of their own; None when there is
        nothing to redo or nothing rolled out (``got`` is then kept whole)."""
        trajectories = self.roll_out(self.run, drawn, self.step) if drawn else []
        if not trajectories:
            return None
        samples, batch = self.score(self.run, drawn, trajectories)
        return merge_groups(got, Rollouts(drawn, trajectories, samples, batch))
