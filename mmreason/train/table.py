"""One step's per-trajectory table: everything the advantage and loss phases read, built once per step.

Rows are trajectories (N), reward columns are components (K). Estimators and losses that need a signal
beyond the rewards declare it (``@register_estimator("ga_grpo", needs=("fidelity",))``); the table gives a
declared column from, in order: a reward column of that name or a reward sub-score ``<reward>/<name>``
(e.g. ``tool_grounding/fidelity``), then a column every trajectory has (``TRAJECTORY_COLUMNS``: ``num_turns``,
``mean_turn_length``), then the sample column of that name (``step_index`` of an unrolled step prompt). ``check_needs`` verifies at start-up that the run can produce every declared column.
docs/methods/trainer.md#declared-columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from mmreason.rewarding import RewardBatch
from mmreason.types import Sample, Trajectory


class MissingColumn(KeyError):
    """A declared column the run cannot produce; the message names it and what could produce it."""

    def __str__(self) -> str:  # KeyError quotes its argument; this one is a sentence
        return str(self.args[0])


@dataclass
class StepTable:
    """The step's rows (N trajectories) with their rewards and columns; the advantage phase sets ``advantages``
    and ``keep``; the update, the step's metrics and the completion log read it."""

    rewards: torch.Tensor  # [N, K] fp32, NaN = the component does not apply
    reward_names: list[str]  # [K]
    weights: torch.Tensor  # [K] from the config
    # [N] the weighted total under reward_missing: the one the logs and samplers see
    total: torch.Tensor
    # [N] long: the trajectory's prompt slot in the step's global batch
    group_ids: torch.Tensor
    dataset_index: torch.Tensor  # [N] long: the dataset row the prompt came from
    tasks: list[str]  # [N] task of each trajectory (algorithm.task_key)
    task_ids: torch.Tensor  # [N] long: tasks as dense ids (sorted names)
    completion_length: torch.Tensor  # [N] long: trained (action) tokens
    truncated: torch.Tensor  # [N] bool: stopped by the length limit, not an end token
    # [N] the sample of each row (its columns are the table's sample columns)
    samples: list[Sample]
    trajectories: list[Trajectory]  # [N] the rows' rollouts
    advantages: torch.Tensor | None = None  # [N] fp32, set by the advantage phase
    # [N] bool, set by the advantage phase: the rows that enter the loss
    keep: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def take(self, rows: list[int]) -> StepTable:
        """Restrict the table to ``rows``."""
        pick = torch.tensor(rows, dtype=torch.long)
        return StepTable(
            self.rewards[pick],
            self.reward_names,
            self.weights,
            self.total[pick],
            self.group_ids[pick],
            self.dataset_index[pick],
            [self.tasks[i] for i in rows],
            self.task_ids[pick],
            self.completion_length[pick],
            self.truncated[pick],
            [self.samples[i] for i in rows],
            [self.trajectories[i] for i in rows],
            None if self.advantages is None else self.advantages[pick],
            None if self.keep is None else self.keep[pick],
        )

    def column(self, name: str) -> torch.Tensor:
        """Return the per-trajectory column ``name`` [N] fp32 (NaN where a row has no value)."""
        matches = [k for k, n in enumerate(self.reward_names) if gives(n, name)]
        if len(matches) > 1:
            found = ", ".join(self.reward_names[k] for k in matches)
            raise MissingColumn(f"column {name!r} is ambiguous: the rewards give {found}")
        if matches:
            return self.rewards[:, matches[0]]
        if name in TRAJECTORY_COLUMNS:
            return torch.tensor([TRAJECTORY_COLUMNS[name](t) for t in self.trajectories], dtype=torch.float32)
        values = [s.meta.get(name) for s in self.samples]
        if any(v is not None for v in values):
            return torch.tensor([_number(v, name, s.id) for v, s in zip(values, self.samples)], dtype=torch.float32)
        raise MissingColumn(
            f"column {name!r}: no reward column {name!r} or '<reward>/{name}' and no sample "
            f"column {name!r} in this step (rewards: {', '.join(self.reward_names)})"
        )


def _assistant_turns(t: Trajectory) -> int:
    return max(1, sum(u.role == "assistant" for u in t.turns))  # a single-turn completion is one turn


# Columns every rollout has, read from the trajectory itself (PlanPO's turn count and per-turn length)
TRAJECTORY_COLUMNS = {
    "num_turns": lambda t: float(_assistant_turns(t)),
    "mean_turn_length": lambda t: t.completion_length / _assistant_turns(t),
}


def gives(column: str, name: str) -> bool:
    """Tell whether a reward column gives ``name``: it does when it is ``name`` or a sub-score ``<reward>/<name>``."""
    return column == name or column.endswith("/" + name)


def _number(value: Any, name: str, sample_id: str) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"sample {sample_id!r}: column {name!r} is {value!r}, not a number") from None


def build_table(
    trajectories: list[Trajectory],
    samples: list[Sample],
    batch: RewardBatch,
    total: torch.Tensor,
    dataset_index: dict[int, int],
    *,
    tasks: list[str],
    task_ids: torch.Tensor,
) -> StepTable:
    """Build the table of one step from its rollouts, their samples and the reward batch."""
    return StepTable(
        rewards=batch.values,
        reward_names=list(batch.names),
        weights=batch.weights,
        total=total,
        group_ids=torch.tensor([t.group_id for t in trajectories], dtype=torch.long),
        dataset_index=torch.tensor([dataset_index[t.group_id] for t in trajectories], dtype=torch.long),
        tasks=tasks,
        task_ids=task_ids,
        completion_length=torch.tensor([t.completion_length for t in trajectories], dtype=torch.long),
        truncated=torch.tensor([bool(t.truncated) for t in trajectories]),
        samples=samples,
        trajectories=list(trajectories),
    )


def check_needs(
    component: str,
    name: str,
    needs: tuple[str, ...],
    reward_columns: list[str],
    sample: Sample | None,
    *,
    producers: dict[str, list[str]],
) -> None:
    """Check at start-up that every declared column comes from a configured reward or the data.

    ``producers`` maps a sub-score key to the registered rewards that declare it, for the error message.
    """
    for need in needs:
        if any(gives(c, need) for c in reward_columns) or need in TRAJECTORY_COLUMNS:
            continue
        if sample is not None and need in sample.meta:
            continue
        hint = (
            f"add a reward that gives it: {', '.join(producers[need])}"
            if producers.get(need)
            else f"give the samples a {need!r} column, or add a reward returning a {need!r} sub-score"
        )
        raise MissingColumn(
            f"{component} {name!r} needs the per-trajectory column {need!r}, which neither the "
            f"configured rewards ({', '.join(reward_columns) or 'none'}) nor the data's samples "
            f"produce; {hint}"
        )
