"""Difficulty-aware augmentation state is per process: a checkpoint keeps every process's FIFO and best traces,
and each resumed process gets back its own (not the main process's)."""

from __future__ import annotations

import json
import types

import accelerate.utils

from mmreason.sampling.difficulty import DifficultyAugmenter
from mmreason.train.loop import own_state, with_every_rank


def _augmenter(rewards: list[float], sample_id: str) -> DifficultyAugmenter:
    aug = DifficultyAugmenter(window=4, min_buffer=1, seed=0)
    for r in rewards:
        aug.observe(sample_id, [r, r], [f"trace {r}", "other"])
    return aug


def test_each_process_gets_back_its_own_fifo_and_best_traces(monkeypatch):
    ranks = [_augmenter([0.0, 0.5], "a"), _augmenter([1.0, 1.0, 0.25], "b")]  # what each process observed
    states = [{"sampler": {}, "augment": r.state_dict()} for r in ranks]
    # the gather a two-process run does: every process receives every process's object, in rank order
    monkeypatch.setattr(accelerate.utils, "gather_object", lambda objs: [s["augment"] for s in states])
    two = types.SimpleNamespace(num_processes=2)
    saved = json.loads(json.dumps(with_every_rank(two, states[0])))  # what rank 0 writes to trainer_state.json
    assert saved["augment"] == states[0]["augment"] and len(saved["augment_by_rank"]) == 2
    for rank, original in enumerate(ranks):
        resumed = DifficultyAugmenter(window=4, min_buffer=1, seed=0)
        resumed.load_state_dict(own_state(saved, rank))
        assert list(resumed.buffer) == list(original.buffer) and resumed.best == original.best
        # the same next plan as the uninterrupted process (ΔR against its own FIFO)
        assert resumed.delta([0.5, 0.5]) == original.delta([0.5, 0.5])
    assert list(ranks[0].buffer) != list(ranks[1].buffer)  # the two really differ
    assert own_state(saved, 2) is None  # a process the checkpoint did not have starts empty


def test_single_process_and_older_checkpoints():
    aug = _augmenter([0.5], "a")
    one = with_every_rank(types.SimpleNamespace(num_processes=1), {"augment": aug.state_dict()})
    assert one["augment_by_rank"] == [one["augment"]] and own_state(one, 0) == aug.state_dict()
    assert own_state({"augment": aug.state_dict()}, 1) == aug.state_dict()  # written before per-rank states
    assert with_every_rank(types.SimpleNamespace(num_processes=2), {"sampler": {}}) == {"sampler": {}}
