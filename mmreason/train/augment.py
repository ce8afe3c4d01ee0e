"""Difficulty-aware augmentation's state in a checkpoint (the method itself: mmreason/sampling/difficulty.py).

Each process keeps its own FIFO (of the groups it rolled out) and best traces (of its prompts); a checkpoint holds
every process's (``augment_by_rank``) and a resumed process takes back its own.
"""

from __future__ import annotations


def with_every_rank(accelerator, state: dict) -> dict:
    """``state`` plus ``augment_by_rank``: every process's augmentation state, gathered (``augment`` stays this
    process's, the main one's in the file). A collective when more than one process runs: all call it."""
    if "augment" not in state:
        return state
    if accelerator.num_processes == 1:
        return {**state, "augment_by_rank": [state["augment"]]}
    from accelerate.utils import gather_object

    return {**state, "augment_by_rank": gather_object([state["augment"]])}


def own_state(state: dict, process_index: int) -> dict | None:
    """This process's augmentation state in a checkpoint's trainer state (None: the checkpoint has none for it,
    e.g. a run resumed on more processes than saved it: that process starts with an empty FIFO)."""
    by_rank = state.get("augment_by_rank")
    if by_rank is None:  # a checkpoint written before states were kept per process
        return state.get("augment")
    return by_rank[process_index] if process_index < len(by_rank) else None
