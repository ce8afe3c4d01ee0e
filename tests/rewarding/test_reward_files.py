"""A reward file named by a path in a config, relative to the config's folder, runs in a short training run."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]

REWARD_FILE = '''
from mmreason.rewarding import per_sample


@per_sample
def about_n_words(sample, trajectory, *, target=2):
    """1 for a completion of `target` words, less the further it is from that."""
    return 1.0 / (1 + abs(len(trajectory.completion_text.split()) - target))
'''


@pytest.mark.slow
def test_reward_file_from_config_runs_in_training(tiny_model_dir, shapes_cache, tmp_path):
    folder = tmp_path / "recipe"
    (folder / "my_rewards").mkdir(parents=True)
    (folder / "my_rewards" / "words.py").write_text(textwrap.dedent(REWARD_FILE))
    config = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    config["rewards"] = [
        {"name": "my_rewards/words.py:about_n_words", "weight": 1.0, "kwargs": {"target": 2}},
        {"name": "think_answer_format", "weight": 0.5},
    ]
    (folder / "recipe.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    args = [
        "train",
        str(folder / "recipe.yaml"),
        f"model.name_or_path={tiny_model_dir}",
        f"output_dir={out}",
        "rollout.num_generations=4",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "max_steps=2",
        "save_steps=0",
        "num_threads=1",
        "eval_steps=0",
    ]
    assert main(args) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    last = rows[-1]
    assert 0.0 < last["rewards/about_n_words/mean"] <= 1.0  # the file's function scored every step
    assert "rewards/think_answer_format/mean" in last
    assert last["count/reward_errors"] == 0
