"""The policy is placed (moved, or sharded by the trainer) before the optimizer is built, so the optimizer's
parameters are the placed model's own and its fp32 master weights live beside them on their device. Before,
the masters were cloned from the CPU model and accelerate moved the model afterwards: on a GPU the first
optimizer step met a CUDA gradient and a CPU master. Shown here with the ``meta`` device as the accelerator's."""

from __future__ import annotations

import os

import pytest
import torch

from mmreason.config import load_config
from mmreason.parallel.sharding import plain_accelerator_env, sharding_dtypes
from mmreason.train.config import TrainConfig
from mmreason.train.precision import MasterWeightAdamW
from mmreason.train.setup import place_model, prepare_training


class MetaAccelerator:
    """The accelerator as placement reads it, on a device that is not the CPU."""

    device = torch.device("meta")
    num_processes = 1
    mixed_precision = "no"

    def prepare(self, *parts):
        return parts


def test_masters_live_beside_the_placed_parameters(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).to(torch.bfloat16)
    model.get_output_embeddings = lambda: model[1]
    cfg = load_config(TrainConfig, None, ["model.dtype=bfloat16", "optim=adamw_torch"])
    acc = MetaAccelerator()
    placed = place_model(model, acc)
    placed, optimizer, _ = prepare_training(cfg, acc, placed, total_steps=2)
    assert isinstance(optimizer, MasterWeightAdamW)
    live = {id(p): p for p in placed.parameters()}
    assert optimizer._pairs and all(id(p) in live for p, _ in optimizer._pairs)
    assert all(m.device == p.device == torch.device("meta") and m.dtype == torch.float32 for p, m in optimizer._pairs)


@pytest.mark.parametrize(
    "model_dtype, mixed, expected",
    [
        (torch.float32, "no", (torch.float32, None)),
        (torch.bfloat16, "no", (torch.float32, torch.bfloat16)),  # fp32 masters sharded, bf16 compute
        (torch.float32, "bf16", (torch.float32, torch.bfloat16)),
        (torch.bfloat16, "bf16", (torch.float32, torch.bfloat16)),
        (torch.float32, "fp16", (torch.float32, torch.float16)),
    ],
)
def test_sharded_parameters_are_fp32_masters_whenever_the_run_computes_low(model_dtype, mixed, expected):
    assert sharding_dtypes(model_dtype, mixed) == expected


def test_accelerate_never_prepares_fsdp_itself_and_fsdp1_is_refused(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    with plain_accelerator_env():
        assert os.environ["ACCELERATE_USE_FSDP"] == "false"
    assert os.environ["ACCELERATE_USE_FSDP"] == "true"
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.raises(ValueError, match="fsdp_version: 2"):
        with plain_accelerator_env():
            pass
