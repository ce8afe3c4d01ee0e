"""Every model family declares its FSDP units (decoder layer, vision block), and they are in the model it builds;
an FSDP launch whose ``fsdp_transformer_layer_cls_to_wrap`` is unset or names another family's classes wraps the
family's instead (``train/launch_checks.set_fsdp_units``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from mmreason.models.families import check_checkpoint
from mmreason.models.tiny import ARCHES, build_tiny_model
from mmreason.train.launch_checks import set_fsdp_units

SHIPPED = "Qwen2_5_VLDecoderLayer,Qwen2_5_VLVisionBlock"  # configs/accelerate/fsdp.yaml and fsdp_cpu.yaml


@pytest.fixture(scope="module")
def checkpoints(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return {
        arch: tiny_model_dir if arch == "qwen2_5_vl" else build_tiny_model(root / arch, seed=0, arch=arch)
        for arch in ARCHES
    }


def _units(path) -> tuple[str, ...]:
    return check_checkpoint(path).units_for(json.loads((path / "config.json").read_text()))


def test_the_shipped_fsdp_configs_name_qwen2_5_vl_units():
    root = Path(__file__).resolve().parents[2] / "configs" / "accelerate"
    for name in ("fsdp.yaml", "fsdp_cpu.yaml"):
        fsdp = yaml.safe_load((root / name).read_text())["fsdp_config"]
        assert fsdp["fsdp_transformer_layer_cls_to_wrap"] == SHIPPED


@pytest.mark.parametrize("arch", ARCHES)
def test_declared_units_are_the_models_decoder_layers_and_vision_blocks(checkpoints, arch):
    from transformers import AutoConfig, AutoModelForImageTextToText

    units = _units(checkpoints[arch])
    with torch.device("meta"):  # the classes, without weights
        model = AutoModelForImageTextToText.from_config(AutoConfig.from_pretrained(checkpoints[arch]))
    where = {type(m).__name__: name for name, m in model.named_modules()}
    assert len(units) == 2 and all(u in where for u in units), (units, sorted(where))
    homes = sorted(where[u].split(".")[1] for u in units)  # model.<language_model | visual | vision_tower>.…
    assert homes[0] == "language_model" and homes[1] in ("visual", "vision_tower"), homes


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("asked", [SHIPPED, None])
def test_an_fsdp_launch_wraps_the_familys_units(checkpoints, arch, asked, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP")
    if asked is None:
        monkeypatch.delenv("FSDP_TRANSFORMER_CLS_TO_WRAP", raising=False)
    else:
        monkeypatch.setenv("FSDP_TRANSFORMER_CLS_TO_WRAP", asked)
    note = set_fsdp_units(str(checkpoints[arch]))
    got = os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP")
    if arch == "qwen2_5_vl" and asked is not None:
        assert note is None and got == SHIPPED  # the config's own classes fit: kept
    else:
        assert got == ",".join(_units(checkpoints[arch]))
        assert note is not None and len(note.splitlines()) == 1 and "fsdp_transformer_layer_cls_to_wrap" in note
        assert ("is not set" in note) == (asked is None)


def test_no_fsdp_launch_changes_nothing(checkpoints, monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    monkeypatch.delenv("FSDP_TRANSFORMER_CLS_TO_WRAP", raising=False)
    assert set_fsdp_units(str(checkpoints["qwen3_vl"])) is None
    assert "FSDP_TRANSFORMER_CLS_TO_WRAP" not in os.environ
