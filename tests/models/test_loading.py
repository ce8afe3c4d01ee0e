"""Model loading: attention choice, LoRA without the vision tower, frozen vision tower, clear errors."""

from __future__ import annotations

import pytest

from mmreason.models import ModelConfig, load_model, resolve_attn_implementation, trainable_parameters


def _pretend(monkeypatch, cuda: bool, flash_attn: bool, capability: tuple[int, int] = (9, 0)):
    import importlib.util

    import torch

    real = importlib.util.find_spec
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    # torch reports bf16 on a pre-Ampere GPU through emulation; natively only from compute capability 8.0
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation or capability >= (8, 0)
    )
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (object() if flash_attn else None) if name == "flash_attn" else real(name, *a),
    )


@pytest.mark.parametrize(
    "cuda,flash_attn,dtype,capability,expected",
    [
        (True, True, "bfloat16", (8, 0), "flash_attention_2"),
        (True, True, "float16", (9, 0), "flash_attention_2"),
        (True, True, "float32", (9, 0), "sdpa"),  # flash-attn has no fp32 kernels
        (True, False, "bfloat16", (9, 0), "sdpa"),
        (False, True, "bfloat16", (9, 0), "sdpa"),
        (True, True, "float16", (7, 5), "sdpa"),  # T4: flash-attn 2 needs Ampere
    ],
)
def test_auto_attention_is_flash_attention_2_only_on_ampere_cuda_with_half_precision(
    monkeypatch, cuda, flash_attn, dtype, capability, expected
):
    import torch

    _pretend(monkeypatch, cuda, flash_attn, capability)
    assert resolve_attn_implementation("auto", getattr(torch, dtype)) == expected
    assert resolve_attn_implementation("eager", getattr(torch, dtype)) == "eager"


@pytest.mark.parametrize("capability, expected", [((7, 0), "float32"), ((8, 0), "bfloat16"), ((9, 0), "bfloat16")])
def test_auto_dtype_is_bf16_only_where_the_gpu_has_it_natively(monkeypatch, capability, expected):
    import torch

    from mmreason.models.loading import resolve_dtype

    _pretend(monkeypatch, True, False, capability)
    assert resolve_dtype("auto") == getattr(torch, expected)


def test_explicit_flash_attention_without_the_package_is_a_clear_error(monkeypatch):
    _pretend(monkeypatch, True, False)
    with pytest.raises(ValueError, match="flash-attn is not installed"):
        resolve_attn_implementation("flash_attention_2")


def test_lora_leaves_the_vision_tower_out_by_default(tiny_model_dir):
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), lora=True, lora_r=4))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert not any("visual" in n for n in trainable)
    with_vision = load_model(
        ModelConfig(name_or_path=str(tiny_model_dir), lora=True, lora_r=4, lora_include_vision=True)
    )
    assert any("visual" in n for n, p in with_vision.named_parameters() if p.requires_grad)


def test_freeze_vision_tower(tiny_model_dir):
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), freeze_vision_tower=True))
    for name, p in model.named_parameters():
        assert p.requires_grad == ("visual" not in name), name
    trainable, total = trainable_parameters(model)
    assert 0 < trainable < total


def test_missing_model_dir_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_model(ModelConfig(name_or_path=str(tmp_path / "nowhere")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(ModelConfig(name_or_path=str(tmp_path / "empty")))


def test_processor_pixel_limits_override(tiny_model_dir):
    from PIL import Image

    from mmreason.media import image_tokens
    from mmreason.models import load_processor

    processor = load_processor(tiny_model_dir, min_pixels=4 * 784, max_pixels=16 * 784)
    grid = processor.image_processor(images=[Image.new("RGB", (400, 300))], return_tensors="pt")["image_grid_thw"]
    assert int(grid.prod() // 4) == image_tokens(300, 400, min_pixels=4 * 784, max_pixels=16 * 784) <= 16
    with pytest.raises(ValueError, match="min_pixels"):
        load_processor(tiny_model_dir, min_pixels=32 * 784, max_pixels=16 * 784)
