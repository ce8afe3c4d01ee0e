"""The GRPO and SFT runs on accelerate: open ``step.py`` (one GRPO step, phase by phase) and ``loop.py`` (the one
run loop of GRPO and SFT: resume, steps, in-training eval, checkpoints, stops) first.

``from mmreason.train import train, train_step, ...`` imports the named module when the name is first read: the
whole trainer (the eval harness, the health monitor, the rollout engines) is not loaded by every command that only
reads ``mmreason.train.config``. SFT's entry is ``mmreason.train.sft.sft``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "train": "mmreason.train.grpo",
    "train_step": "mmreason.train.step",
    "run_loop": "mmreason.train.loop",
    "Method": "mmreason.train.loop",
    "Run": "mmreason.train.setup",
    "setup_run": "mmreason.train.setup",
    "TrainConfig": "mmreason.train.config",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mmreason.train' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
