"""``--model``: model directories, `mmreason train` run directories (full weights or LoRA), adapters."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import yaml

from mmreason.eval.config import ModelArgs
from mmreason.eval.model import load_for_eval, resolve_model, sanitize


def _run_dir(root, base_dir, steps=(1, 2)):
    """A training run directory as `mmreason train` leaves it: config.yaml + checkpoint-<step>/."""
    root.mkdir()
    (root / "config.yaml").write_text(yaml.safe_dump({"model": {"name_or_path": str(base_dir)}, "seed": 0}))
    for step in steps:
        (root / f"checkpoint-{step}" / "model").mkdir(parents=True)
        (root / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"step": step}))
    (root / "checkpoint-9.tmp" / "model").mkdir(parents=True)  # an interrupted save: never chosen
    return root


def test_a_model_directory(tiny_model_dir):
    r = resolve_model(str(tiny_model_dir))
    assert (r.weights, r.processor_dir, r.adapter, r.checkpoint) == (tiny_model_dir, tiny_model_dir, None, None)
    assert r.name == sanitize(str(tiny_model_dir)) and "/" not in r.name
    assert sanitize("./runs/a b/") == "runs__a b"


def test_a_run_directory_with_full_weights(run_eval, tiny_model_dir, shapes_cache, tmp_path):
    run = _run_dir(tmp_path / "run", tiny_model_dir)
    shutil.copytree(tiny_model_dir, run / "checkpoint-2" / "model", dirs_exist_ok=True)
    r = resolve_model(str(run))
    assert r.checkpoint == run / "checkpoint-2" and r.weights == run / "checkpoint-2" / "model"
    assert r.adapter is None and r.name.endswith("run__checkpoint-2")
    out = run_eval(
        "--model",
        str(run),
        "--tasks",
        "shapes",
        "--limit",
        "2",
        "--output_path",
        str(tmp_path / "o"),
        "--gen_kwargs",
        "max_new_tokens=4",
    )
    assert out.results_path.parent.name == r.name
    assert out.results["config"]["model"]["checkpoint"] == str((run / "checkpoint-2").resolve())
    # A checkpoint directory itself is accepted too.
    assert resolve_model(str(run / "checkpoint-2")).weights == run / "checkpoint-2" / "model"


def test_a_run_directory_without_checkpoints(tiny_model_dir, tmp_path):
    run = _run_dir(tmp_path / "run", tiny_model_dir, steps=())
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        resolve_model(str(run))
    with pytest.raises(FileNotFoundError, match="neither a model directory"):
        resolve_model(str(tmp_path))


def test_a_lora_run_directory_loads_the_adapter_on_its_base(tiny_model_dir, tmp_path):
    from peft import PeftModel

    from mmreason.models.loading import ModelConfig, apply_lora, load_model

    run = _run_dir(tmp_path / "run", tiny_model_dir, steps=(3,))
    trained = apply_lora(
        load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False),
        ModelConfig(lora=True, lora_r=4),
    )
    with torch.no_grad():  # a LoRA starts as the identity (B = 0); make it change the model
        for name, p in trained.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p, generator=torch.Generator().manual_seed(0)) * 0.5)
    adapter_dir = run / "checkpoint-3" / "model"
    trained.save_pretrained(adapter_dir)
    r = resolve_model(str(run))
    assert (r.adapter, r.weights, r.processor_dir) == (adapter_dir, tiny_model_dir, tiny_model_dir)
    model, processor = load_for_eval(r, ModelArgs(dtype="float32"), "cpu")
    fresh = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False)
    ids = processor.tokenizer("What colour is the shape?", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        base = fresh(input_ids=ids).logits
        reference = PeftModel.from_pretrained(fresh, adapter_dir).merge_and_unload()(input_ids=ids).logits
        ours = model(input_ids=ids).logits
    torch.testing.assert_close(ours, reference)
    assert (ours - base).abs().max() > 1e-3  # the adapter is really applied


def test_an_extra_adapter_from_model_args(tiny_model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        resolve_model(str(tiny_model_dir), adapter=str(tmp_path))
