"""Every pack's tiny GRPO recipe on every new model family: one training step through the real CLI, then
``mmreason eval`` scores the run on the pack's held-out split (a few documents). Kept short: the recipes'
own tests check what they learn; this checks each family runs them end to end, and says which update path
(shared prefix or plain) it took."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.config import read_yaml
from mmreason.models.families import family_for
from mmreason.models.tiny import build_tiny_model

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RECIPES = [
    "quickstart.yaml",
    "vision/vision_grpo_tiny.yaml",
    "videoqa/videoqa_grpo_tiny.yaml",
    "mrag/mrag_step_grpo_tiny.yaml",
    "mrag/mrag_online_grpo_tiny.yaml",
    "docseeker/docseeker_grpo_tiny.yaml",
    "medscope/medscope_ga_grpo_tiny.yaml",
]
ONE_STEP = [
    "max_steps=1",
    "prompts_per_step=2",
    "rollout.num_generations=2",
    "rollout.max_completion_length=8",
    "mini_batch_size=4",
    "eval_steps=0",
    "save_steps=1",
    "num_threads=1",
]


CASES = [(arch, r) for arch in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "internvl") for r in RECIPES]
_MODELS: dict[str, Path] = {}


@pytest.fixture(scope="module")
def family_models(tmp_path_factory):
    def get(arch: str) -> Path:
        if arch not in _MODELS:
            _MODELS[arch] = build_tiny_model(tmp_path_factory.mktemp(arch) / "model", seed=0, arch=arch)
        return _MODELS[arch]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("arch, recipe", CASES)
def test_recipe_trains_a_step_and_evaluates(family_models, arch, recipe, shapes_cache, tmp_path, one_torch_thread):
    family_model = family_models(arch)
    out = tmp_path / "run"
    assert (
        main(["train", str(CONFIGS / recipe), f"model.name_or_path={family_model}", f"output_dir={out}", *ONE_STEP])
        == 0
    )
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in rows if "loss" in r] == [1]
    shared = family_for(json.loads((family_model / "config.json").read_text())["model_type"]).shared_prefix == "kv"
    assert [r["update/shared_prefix"] for r in rows if "loss" in r] == [1.0 if shared else 0.0]  # or plain path
    task = read_yaml(CONFIGS / recipe)["data"]["task"]
    results = tmp_path / "eval"
    assert main(["eval", "--model", str(out), "--tasks", task, "--limit", "2", "--output_path", str(results)]) == 0
    (scores,) = results.rglob("*_results.json")
    assert task in json.loads(scores.read_text())["results"]
