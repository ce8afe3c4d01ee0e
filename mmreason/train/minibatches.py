"""How one optimizer step's rows are cut into mini-batches: whole groups, longest first.

Rows of a group stay together (the shared-prefix update encodes a group's prompt once per mini-batch it
appears in), groups are ordered by length (prompt + longest completion, longest first) so each padded
mini-batch holds sequences of similar length, and inside a group the longer completions come first. The
order depends only on the lengths and the row indices, so every run cuts the same mini-batches. The
gradient does not depend on the cut: each mini-batch's loss is weighted by its share (update.py).
"""

from __future__ import annotations

from mmreason.types import Trajectory


def length_sorted_minibatches(rows: list[int], trajectories: list[Trajectory], size: int) -> list[list[int]]:
    """Cut ``rows`` (indices into ``trajectories``) into mini-batches of at most ``size`` rows.

    Whole groups are packed greedily in length order; a group larger than ``size`` fills mini-batches
    of its own.
    """
    if size < 1:
        raise ValueError(f"mini_batch_size must be >= 1, got {size}")
    groups: dict[int, list[int]] = {}
    for i in rows:
        groups.setdefault(trajectories[i].group_id, []).append(i)
    members = [sorted(g, key=lambda i: (-trajectories[i].token_ids.numel(), i)) for g in groups.values()]
    members.sort(key=lambda g: (-trajectories[g[0]].token_ids.numel(), g[0]))
    out: list[list[int]] = []
    current: list[int] = []
    for group in members:
        if current and len(current) + len(group) > size:
            out.append(current)
            current = []
        for i in group:
            if len(current) == size:
                out.append(current)
                current = []
            current.append(i)
    if current:
        out.append(current)
    return out
