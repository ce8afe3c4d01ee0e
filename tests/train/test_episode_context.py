"""Training episodes get room for every turn and observation within the limits: a prompt near
``max_prompt_length`` with long observations still plays all ``max_turns`` turns, and an observation over
``max_observation_tokens`` cuts its episode visibly (``episodes/cut``, the completion's ``ended``)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.rollout.multiturn import episode_context

PACK = """
from PIL import Image
from mmreason.rollout.environment import Observation
from mmreason.taskpack import TaskPack
from mmreason.types import Sample


class Env:
    def reset(self, sample):
        self.turns = 0

    def step(self, action_text):
        self.turns += 1
        return Observation(text="seen " * WORDS, info={"turn": self.turns}, done=False)


def load(path, split="train", **options):
    content = [{"type": "image"}, {"type": "text", "text": "Colour?"}]
    return [Sample(f"s{i}", [{"role": "user", "content": content}], answer="red",
                   images=[Image.new("RGB", (56, 56), "red")]) for i in range(2)]


PACK = TaskPack(name="long_obs", description="long text observations", load=load, make_environment=Env)
"""


def test_the_episode_context_holds_the_prompt_every_turn_and_every_observation():
    assert episode_context(512, 3, 40, 256) == 512 + 3 * 40 + 2 * 256
    assert episode_context(100, 1, 8, 1000) == 108  # one turn: no observation enters


def _train(tiny_model_dir, tmp_path, words: int):
    (tmp_path / "long_obs.py").write_text(textwrap.dedent(PACK).replace("WORDS", str(words)))
    out = tmp_path / f"run{words}"
    root = Path(__file__).resolve().parents[2]
    assert (
        main(
            [
                "train",
                str(root / "configs/quickstart.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                f"data.task={tmp_path}/long_obs.py:PACK",
                "data.train_path=unused",
                "data.max_prompt_length=64",
                "data.min_pixels=3136",
                "data.max_pixels=3136",
                "rollout.num_generations=2",
                "rollout.max_completion_length=4",
                "rollout.max_turns=3",
                "rollout.max_observation_tokens=200",
                "prompts_per_step=2",
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
    (row,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    completions = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    return row, completions


@pytest.mark.slow
def test_long_observations_within_the_limit_leave_every_turn_to_the_model(tiny_model_dir, tmp_path):
    # ~160-token observations (the tiny tokenizer spends 3 tokens on "seen "): prompt (<= 64) + 3 turns of 4 +
    # 2 observations fill ~400 tokens, far over the 64 + 3 x 4 a context without room for observations allows
    row, completions = _train(tiny_model_dir, tmp_path, words=50)
    assert row["episodes/cut"] == 0
    assert len(completions) == 4
    assert all(c["completion"].count("<observation>") == 2 for c in completions)


@pytest.mark.slow
def test_an_observation_over_the_limit_cuts_its_episode_visibly(tiny_model_dir, tmp_path):
    row, completions = _train(tiny_model_dir, tmp_path, words=400)  # ~1,200 tokens > max_observation_tokens=200
    assert row["episodes/cut"] == 4
    assert all("<observation>" not in c["completion"] for c in completions)
