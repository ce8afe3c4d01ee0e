"""Non-finite weights and gradients are caught: a NaN gradient (left by clipping) skips the update and is
counted, sampling from NaN logits stops the run naming the step, and the weights never turn NaN."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mmreason.cli import main
from mmreason.config import load_config
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.row_sampling import NonFiniteLogitsError, RowSeededSampling
from mmreason.train.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _overrides(model_dir, out, *extra) -> list[str]:
    return [
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        "rollout.num_generations=4",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "num_threads=1",
        "eval_steps=0",
        "log_completions_steps=0",
        *extra,
    ]


def test_sampling_refuses_non_finite_logits():
    sampler = RowSeededSampling([1, 2, 3], GenerationSettings(max_new_tokens=4, temperature=1.0))
    fine = torch.tensor([[0.0, 1.0, float("-inf")]] * 3)
    assert sampler(None, fine).shape == (3, 3)
    for bad in (float("nan"), float("inf")):
        scores = fine.clone()
        scores[1, 0] = bad
        with pytest.raises(NonFiniteLogitsError, match=r"position 1 \(rows \[1\]\)"):
            sampler(None, scores)
    with pytest.raises(NonFiniteLogitsError):  # a row with no token left to draw
        RowSeededSampling([1], GenerationSettings(max_new_tokens=4, temperature=1.0))(
            None, torch.full((1, 3), -math.inf)
        )


def test_a_nan_gradient_left_by_clipping_skips_the_update(tiny_model_dir, shapes_cache, tmp_path, one_torch_thread):
    # Clipping with a NaN max norm turns every gradient into NaN while the norm it returns is finite: the
    # check must look after clipping. Before: the NaN update went through and step 2 crashed in sampling
    # ("index 701 is out of bounds for dimension 1 with size 701").
    from mmreason.train.grpo import train

    cfg = load_config(
        TrainConfig, QUICKSTART, _overrides(tiny_model_dir, tmp_path / "run", "max_steps=2", "save_steps=0")
    )
    cfg.max_grad_norm = math.nan  # past the config check, as a library caller could
    run = train(cfg)
    assert run.counters.nan_steps == 2
    events = (tmp_path / "run" / "events.log").read_text()
    assert events.count("nonfinite_grad") == 2
    before = load_file(Path(tiny_model_dir) / "model.safetensors")
    after = load_file(tmp_path / "run" / "checkpoint-2" / "model" / "model.safetensors")
    assert all(torch.equal(before[k], after[k]) for k in before)  # no update applied, nothing NaN


def test_nan_weights_stop_the_run_naming_the_step(tiny_model_dir, shapes_cache, tmp_path, capsys, one_torch_thread):
    broken = tmp_path / "nan-model"
    shutil.copytree(tiny_model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    head = [k for k in weights if "lm_head" in k or "embed_tokens" in k]
    for k in head:
        weights[k] = torch.full_like(weights[k], math.nan)
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    rc = main(["train", QUICKSTART, *_overrides(broken, tmp_path / "run", "max_steps=1")])
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bars: one error line
    assert rc == 2
    assert last.startswith("mmreason train: error: step 1: the model's logits are NaN or infinite"), last
