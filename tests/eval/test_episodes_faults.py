"""Evaluation in a pack's environment: a doc whose environment cannot start is a failed doc (named, with its
reason), and the other docs are scored."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from mmreason.rollout.environment import Observation
from mmreason.taskpack import TASKS, TaskPack
from mmreason.types import Sample

NAME = "test_env_start"


class Env:
    stop_strings = ("</tool_call>",)

    def reset(self, sample):
        if sample.id == "d1":
            raise FileNotFoundError("d1.mp4")
        self.turns = 0

    def step(self, action_text):
        self.turns += 1
        return Observation(text="seen", images=[Image.new("RGB", (56, 56), "red")], done=self.turns >= 2)


def _load(path, split="eval", **options):
    content = [{"type": "image"}, {"type": "text", "text": "Colour?"}]
    return [
        Sample(
            f"d{i}",
            [{"role": "user", "content": content}],
            answer="red",
            images=[Image.new("RGB", (56, 56), "red")],
            task=NAME,
        )
        for i in range(3)
    ]


@pytest.fixture
def env_pack():
    TASKS.add(
        NAME,
        TaskPack(
            name=NAME,
            description="test-only: one doc's environment cannot start",
            load=_load,
            metrics={"contains": lambda s, c: float(s.answer in c)},
            make_environment=Env,
            max_turns=2,
        ),
    )
    yield
    del TASKS._items[NAME]


def test_a_doc_whose_environment_cannot_start_is_a_failed_doc(run_eval, env_pack, tiny_model_dir, tmp_path):
    out = run_eval(
        "--model",
        str(tiny_model_dir),
        "--tasks",
        NAME,
        "--output_path",
        str(tmp_path / "out"),
        "--log_samples",
        "--gen_kwargs",
        "max_new_tokens=4",
    )
    res = out.results["results"][NAME]
    assert (res["n"], res["n_failed"], res["failed_ids"]) == (2, 1, ["d1"])
    rows = {r["doc_id"]: r for r in map(json.loads, out.samples_paths[NAME].read_text().splitlines())}
    assert "cannot start: FileNotFoundError" in rows["d1"]["error"]
    assert "episode" in rows["d0"] and "episode" in rows["d2"]
