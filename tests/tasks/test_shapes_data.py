"""The quickstart pack's data: held-out images are never training images; the metric is exact."""

from __future__ import annotations

import hashlib
from pathlib import Path

from mmreason.tasks.shapes.data import shapes_load
from mmreason.tasks.shapes.scoring import shapes_metric_accuracy
from mmreason.tasks.shapes.synth import COLOURS


def _digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_eval_images_are_never_training_images(shapes_cache):
    train, held_out = shapes_load(split="train"), shapes_load(split="eval")
    assert len(train) == 256 and len(held_out) == 64
    assert not {_digest(s.images[0]) for s in train} & {_digest(s.images[0]) for s in held_out}
    assert {s.answer for s in held_out} == set(COLOURS)  # every colour is tested


def test_accuracy_needs_the_whole_answer(shapes_cache):
    sample = shapes_load(split="eval")[0]
    other = next(c for c in COLOURS if c != sample.answer)
    assert shapes_metric_accuracy(sample, f" {sample.answer.capitalize()}.") == 1.0
    assert shapes_metric_accuracy(sample, f"{sample.answer} {other}") == 0.0  # no credit for listing colours
    assert shapes_metric_accuracy(sample, sample.answer[1:]) == 0.0  # nor for a fragment
