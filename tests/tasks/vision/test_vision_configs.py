"""Every shipped vision / TON recipe loads, names registered components, and the data tools run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmreason import rl
from mmreason.cli import main
from mmreason.config import load_config
from mmreason.rewarding.resolve import resolve_reward
from mmreason.sampling import SAMPLERS
from mmreason.taskpack import TASKS
from mmreason.train.config import TrainConfig

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "vision").glob("*.yaml"))
OURS = [p for p in CONFIGS if p.name.startswith(("vision_", "ton_"))]


def test_the_five_recipes_and_their_tiny_variants_ship():
    names = {p.stem for p in OURS}
    for recipe in ("vision_grpo", "vision_g2rpo", "vision_vas", "ton_sft", "ton_grpo"):
        assert recipe in names and f"{recipe}_tiny" in names


@pytest.mark.parametrize("path", OURS, ids=[p.name for p in OURS])
def test_recipe_loads_and_names_registered_components(path):
    cfg = load_config(TrainConfig, path)
    assert TASKS.get(cfg.data.task).name == "vision"
    rl.ESTIMATORS.get(cfg.algorithm.estimator)
    SAMPLERS.get(cfg.sampler.name)
    for r in cfg.rewards:
        assert callable(resolve_reward(r.name))
    if cfg.algorithm.entropy_coef:
        assert "default" in cfg.algorithm.entropy_band
    if path.stem.startswith("ton_sft"):
        assert cfg.data.task_args["thought_dropout"] == 0.5 and cfg.data.task_args["answer_format"] == "think"
    if path.stem.startswith("ton_grpo"):
        assert [(r.name, r.weight) for r in cfg.rewards if r.name == "skip_think"] == [("skip_think", 0.0)]


def test_data_tools(tmp_path, capsys, shapes_cache):
    assert main(["data", "vision", "synthetic", str(tmp_path / "s"), "--n", "4", "--size", "56"]) == 0
    assert len((tmp_path / "s" / "data.jsonl").read_text().splitlines()) == 4
    rows = [
        {"id": str(i), "image": "/a.png", "question": "q", "answer": a, "answer_type": "yes/no", "template": "t"}
        for i, a in enumerate(["no", "no", "yes"])
    ]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(["eval", "baseline", "--task", "vision", "--train", str(data), "--data", str(data)]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (out["accuracy"], out["n_train"], out["n"]) == (round(2 / 3, 4), 3, 3)
