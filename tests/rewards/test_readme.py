"""The README's reward examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from PIL import Image
from reward_factory import sample, traj

from mmreason.rewarding import REWARDS, RewardRunner, RewardSpec

README = Path(__file__).resolve().parents[2] / "rewards" / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def test_readme_examples_register_and_score():
    names = ("mentions_answer", "answer_in_choices", "brightness_matches")
    namespace: dict = {}
    try:
        for block in _python_blocks():
            exec(compile(block, str(README), "exec"), namespace)
        bright = Image.new("RGB", (8, 8), (250, 250, 250))
        dark = Image.new("RGB", (8, 8), (5, 5, 5))
        samples = [
            sample("cat", id="a", images=[bright], choices=["cat", "dog"]),
            sample("cat", id="b", images=[dark], choices=["cat", "dog"]),
        ]
        trajectories = [
            traj("<answer>It is bright, a Cat.</answer>", sample_id="a"),
            traj("<answer>bright dog</answer>", sample_id="b"),
        ]
        runner = RewardRunner([RewardSpec(name) for name in names])
        batch = runner(samples, trajectories)
        assert batch.names == list(names)
        assert batch.values.tolist() == [[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]
        assert not batch.errors
        assert np.isfinite(batch.total().numpy()).all()
    finally:
        for name in names:
            REWARDS._items.pop(name, None)
