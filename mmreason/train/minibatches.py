"""How one optimizer step's rows are cut into mini-batches: whole groups, longest first.

Rows of a group stay together (the shared-prefix update encodes a group's prompt once per mini-batch it
appears in), groups are ordered by length (prompt + longest completion, longest first) so each padded
mini-batch holds sequences of similar length, and inside a group the longer completions come first. The
order depends only on the lengths and the row indices, so every run cuts the same mini-batches. The
gradient does not depend on the cut: each mini-batch's loss is weighted by its share (update.py).
"""

from __future__ import annotations

from collections.abc import Callable

from mmreason.types import Trajectory


def length_sorted_minibatches(rows: list[int], trajectories: list[Trajectory], size: int) -> list[list[int]]:
    """Cut ``rows`` (indices into ``trajectories``) into mini-batches of at most ``size`` rows.

    Whole groups are packed greedily in length order; a group larger than ``size`` fills mini-batches
    of its own.
    """
    if size < 1:
        raise ValueError(f"mini_batch_size must be >= 1, got {size}")
    return cut_groups(groups_longest_first(rows, trajectories), size, len)


def cut_groups(groups: list[list[int]], budget: int, cost: Callable[[list[int]], int]) -> list[list[int]]:
    """Cut ``groups`` greedily, in their order, into batches whose ``cost`` is at most ``budget``: a group joins the
    current batch whole when it fits, else starts a new one; a group over the budget is cut row by row, and a row
    over it is a batch of its own."""
    out: list[list[int]] = []
    current: list[int] = []
    for group in groups:
        if current and cost(current + group) > budget:
            out.append(current)
            current = []
        for i in group:
            if current and cost(current + [i]) > budget:
                out.append(current)
                current = []
            current.append(i)
    if current:
        out.append(current)
    return out


def groups_longest_first(rows: list[int], trajectories: list[Trajectory]) -> list[list[int]]:
    """Order ``rows`` by group, groups by their longest row (longest first), rows longest first inside a group; ties by
    row index, so every process and every run cuts the same way."""
    groups: dict[int, list[int]] = {}
    for i in rows:
        groups.setdefault(trajectories[i].group_id, []).append(i)
    members = [sorted(g, key=lambda i: (-trajectories[i].token_ids.numel(), i)) for g in groups.values()]
    members.sort(key=lambda g: (-trajectories[g[0]].token_ids.numel(), g[0]))
    return members
