"""Micro-batches by token count (``max_tokens_per_micro_batch``) instead of by row count.

Row-count mini-batches hold as many rows of a long document as of a one-line answer; a token budget holds as
many tokens. The cut follows ``minibatches.length_sorted_minibatches``: whole groups, longest first, a group
that does not fit its own micro-batches row by row, and a single row longer than the budget a micro-batch of
its own (never dropped, never truncated). Tokens are real tokens, not padded width: each row's prompt and
completion (``token_ids``), and with the shared prefix a group's prompt once per micro-batch it appears in.

Every process must run as many micro-batches (each backward is a collective): the processes agree on the
most any of them needs for each optimizer step, and one that needs fewer splits its heaviest micro-batches
(by groups, then by rows) until it has that many, instead of repeating one with weight 0; only a process
with fewer rows than micro-batches is left to ``agree.equal_minibatches``'s stand-ins. The gradient does not
depend on the cut (each micro-batch's loss is weighted by its share, update.py), so it equals row-count
batching's to float summation order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mmreason.parallel.agree import most_over_ranks
from mmreason.train.minibatches import cut_groups, groups_longest_first, length_sorted_minibatches
from mmreason.types import Trajectory

if TYPE_CHECKING:
    from accelerate import Accelerator

Cost = Callable[[list[int]], int]


def micro_batches(
    accelerator: Accelerator,
    parts: list[list[int]],
    trajectories: list[Trajectory],
    *,
    mini_batch_size: int,
    max_tokens: int | None,
    most_parts: int,
    shared_prompt: bool = False,
) -> list[list[list[int]]]:
    """Cut the micro-batches of each share ``parts[p]`` (row indices into ``trajectories``). Each holds
    ``mini_batch_size`` rows when ``max_tokens`` is None (today's cut), else at most ``max_tokens`` tokens. Every
    process gets as many as the others where the rows allow (``most_parts``: the optimizer steps every process runs at
    most)."""
    if max_tokens is None:
        return [length_sorted_minibatches(part, trajectories, mini_batch_size) for part in parts]
    cost = token_cost(trajectories, shared_prompt=shared_prompt)
    chunks = [budget_minibatches(part, trajectories, max_tokens, cost) for part in parts]
    agreed = most_over_ranks(accelerator, [len(cs) for cs in chunks] + [0] * (most_parts - len(chunks)))
    return [split_to(cs, n, trajectories, cost) for cs, n in zip(chunks, agreed)]


def token_cost(trajectories: list[Trajectory], *, shared_prompt: bool = False) -> Cost:
    """Count the tokens a micro-batch of these rows runs through the model: every row's prompt + completion, or with
    ``shared_prompt`` (the shared-prefix update) each group's prompt once plus its rows' completions."""

    def cost(rows: list[int]) -> int:
        total = sum(int(trajectories[i].token_ids.numel()) for i in rows)
        if shared_prompt:
            prompts: dict[int, list[int]] = {}
            for i in rows:
                prompts.setdefault(trajectories[i].group_id, []).append(trajectories[i].prompt_length)
            total -= sum(sum(p) - max(p) for p in prompts.values())
        return total

    return cost


def budget_minibatches(rows: list[int], trajectories: list[Trajectory], budget: int, cost: Cost) -> list[list[int]]:
    """Cut ``rows`` into micro-batches of at most ``budget`` tokens (``cost``), whole groups in length order (longest
    first, as ``length_sorted_minibatches``); a group over the budget is cut row by row, and a row over it is a
    micro-batch of its own."""
    if budget < 1:
        raise ValueError(f"max_tokens_per_micro_batch must be >= 1, got {budget}")
    return cut_groups(groups_longest_first(rows, trajectories), budget, cost)


def split_to(chunks: list[list[int]], count: int, trajectories: list[Trajectory], cost: Cost) -> list[list[int]]:
    """Cut ``chunks`` into ``count`` micro-batches where they hold enough rows: the heaviest micro-batch with more than
    one row is halved (by whole groups when it holds several, else by rows) until there are ``count``. A half never
    exceeds the micro-batch it came from, so the budget still holds."""
    out = [list(c) for c in chunks]
    while len(out) < count:
        cuttable = [k for k, c in enumerate(out) if len(c) > 1]
        if not cuttable:
            break
        k = max(cuttable, key=lambda j: (cost(out[j]), -j))
        out[k : k + 1] = _halves(out[k], trajectories, cost)
    return out


def _halves(rows: list[int], trajectories: list[Trajectory], cost: Cost) -> list[list[int]]:
    """Split ``rows`` into two non-empty parts with costs as even as a greedy cut makes them (heaviest unit to the
    lighter part), units being whole groups when there are several, else rows."""
    groups = groups_longest_first(rows, trajectories)
    units = groups if len(groups) > 1 else [[i] for i in groups[0]]
    units.sort(key=lambda u: -cost(u))
    parts: tuple[list[int], list[int]] = ([], [])
    for unit in units:
        lighter = min((0, 1), key=lambda j: (cost(parts[j]) if parts[j] else -1, j))
        parts[lighter].extend(unit)
    return [p for p in parts if p]
