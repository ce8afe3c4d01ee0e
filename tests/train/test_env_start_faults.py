"""A sample whose environment cannot start (reset raises) is a counted, logged broken sample: its group
leaves the step and the run goes on. The environment's time is logged as a part of generation."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mmreason.cli import main

PACK = """
import time

from PIL import Image
from mmreason.rollout.environment import Observation
from mmreason.taskpack import TaskPack
from mmreason.types import Sample


class Env:
    stop_strings = ("</tool_call>",)

    def reset(self, sample):
        if sample.id == "s1":
            raise FileNotFoundError("s1.mp4")
        self.turns = 0

    def step(self, action_text):
        time.sleep(0.05)  # a tool that takes a while
        self.turns += 1
        return Observation(text="seen", images=[Image.new("RGB", (56, 56), "red")], done=self.turns >= 2)


def load(path, split="train", **options):
    content = [{"type": "image"}, {"type": "text", "text": "Colour?"}]
    return [Sample(f"s{i}", [{"role": "user", "content": content}], answer="red",
                   images=[Image.new("RGB", (56, 56), "red")]) for i in range(4)]


PACK = TaskPack(name="env_start", description="one sample whose environment cannot start", load=load,
                make_environment=Env)
"""


@pytest.mark.slow
def test_an_environment_that_cannot_start_skips_its_group_and_the_run_goes_on(tiny_model_dir, tmp_path):
    (tmp_path / "env_pack.py").write_text(textwrap.dedent(PACK))
    out = tmp_path / "run"
    root = Path(__file__).resolve().parents[2]
    assert (
        main(
            [
                "train",
                str(root / "configs/quickstart.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                f"data.task={tmp_path}/env_pack.py:PACK",
                "data.train_path=unused",
                "rollout.num_generations=2",
                "rollout.max_completion_length=4",
                "rollout.max_turns=2",
                "prompts_per_step=4",
                "max_steps=1",
                "save_steps=0",
                "eval_steps=0",
                "num_threads=1",
                "log_completions_steps=1",
                "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
            ]
        )
        == 0
    )
    events = [json.loads(x) for x in (out / "events.log").read_text().splitlines()]
    bad = [e for e in events if e["event"] == "bad_sample"]
    assert [e["sample_id"] for e in bad] == ["s1"] and "cannot start: FileNotFoundError" in bad[0]["reason"]
    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["count/bad_samples"] == 1 and row["count/env_faults"] == 0
    # 3 groups x 2 episodes, each at least one 0.05 s step: the environment's share of generation
    assert 6 * 0.05 <= row["time/environment"] <= row["time/generate"]
    completions = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    assert sorted({c["sample_id"] for c in completions}) == ["s0", "s2", "s3"]
