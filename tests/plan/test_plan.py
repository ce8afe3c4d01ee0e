"""`mmreason plan`: parameter counts equal transformers' own, hand-worked byte counts, EasyR1's published
hardware table (pure arithmetic), the CLI on a recipe, and one measured update of the tiny model against the
planner (the full table for three sizes is `mmreason bench plan-check`, mmreason/bench/README.md)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from transformers import AutoModelForImageTextToText

from mmreason.cli import main
from mmreason.models import tiny_families
from mmreason.models.tiny import SIZES, model_config
from mmreason.plan import memory
from mmreason.plan.memory import EASYR1, GIB, TODAY, RunSettings, plan, what_fits
from mmreason.plan.shapes import PUBLISHED, from_config, load_shape

IDS = {
    name: 1000 + i
    for i, name in enumerate(
        [
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|vision_start|>",
            "<|vision_end|>",
            "<|vision_pad|>",
            "<|image_pad|>",
            "<|video_pad|>",
        ]
    )
}


def _config(arch: str):
    if arch in tiny_families.ARCHES:
        return tiny_families.model_config(arch, SIZES["small"], IDS, 1024)
    return model_config(arch, SIZES["small"], IDS, 1024)


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_parameter_count_equals_the_meta_device_count(arch):
    config = _config(arch)
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    assert from_config(config.to_dict()).parameters() == sum(p.numel() for p in model.parameters())


def test_published_sizes_count_to_the_hub_sizes():
    """The hub lists 3.75 B, 8.29 B, 33.5 B and 73.4 B parameters for these checkpoints."""
    counts = {name: from_config(c).parameters() / 1e9 for name, c in PUBLISHED.items()}
    assert round(counts["Qwen/Qwen2.5-VL-3B-Instruct"], 2) == 3.75
    assert round(counts["Qwen/Qwen2.5-VL-7B-Instruct"], 2) == 8.29
    assert round(counts["Qwen/Qwen2.5-VL-32B-Instruct"], 1) == 33.5
    assert round(counts["Qwen/Qwen2.5-VL-72B-Instruct"], 1) == 73.4


def test_chunk_size_is_the_heads():
    from mmreason.rl import lm_head

    assert memory.HIDDEN_CHUNK_ELEMENTS == lm_head.HIDDEN_CHUNK_ELEMENTS
    assert memory.HEAD_CHUNK_FREE_SHARE == lm_head.HEAD_CHUNK_FREE_SHARE
    assert memory.HEAD_CHUNK_MAX_BYTES == lm_head.HEAD_CHUNK_MAX_BYTES
    assert memory.head_chunk_rows(151_936, "cpu", 80) == (1 << 24) // 151_936 == 110
    # on an 80 GB card: 10 GiB is over the 4 GiB cap; 4 GiB / (3 x 4 B x 151,936) = 2,355 rows
    assert memory.head_chunk_rows(151_936, "cuda", 80) == (4 << 30) // (12 * 151_936) == 2355
    # on a 16 GB card: 2 GiB / (12 x 151,936) = 1,177 rows
    assert memory.head_chunk_rows(151_936, "cuda", 16) == (2 << 30) // (12 * 151_936) == 1177


def test_model_state_bytes_per_parameter_by_hand():
    """bf16 with fp32 masters on one process: 2 (weight) + 2 (gradient) + 8 (master and its gradient) + 8 (two
    fp32 moments) = 20 B a parameter; FSDP2 over 4 shards fp32 masters: (4 + 4 + 8) / 4 = 4 B."""
    shape = from_config(PUBLISHED["Qwen/Qwen2.5-VL-7B-Instruct"])
    n = shape.parameters()
    one = memory.model_state(shape, RunSettings(dtype="bfloat16"))
    assert sum(i.bytes for i in one) == 20 * n
    fsdp = [i for i in memory.model_state(shape, RunSettings(gpus=4, sharding="fsdp")) if "gathered" not in i.name]
    assert sum(i.bytes for i in fsdp) == 4 * n


def test_activation_bytes_per_token_by_hand():
    """The tiny shape (h 64, I 128, 2 heads of 32, 1 KV head) in fp32: norms 2 x (4 + 4) x 64 = 1024; attention with
    the KV heads repeated (SDPA, masked) 4 x (3 x 64 + 2 x 64) = 1280, with flash 4 x (3 x 64 + 2 x 32) = 1024; MLP
    4 x 4 x 128 = 2048. In bf16 weights, flash: 2 x (4 + 2) x 64 + 2 x (3 x 64 + 2 x 32) + 4 x 2 x 128 = 2304."""
    shape = from_config(model_config("qwen2_5_vl", SIZES["tiny"], IDS, 1024).to_dict())
    fp32 = RunSettings(dtype="float32", device="cpu")
    assert memory.layer_bytes_per_token(shape, replace(fp32, attention="sdpa")) == 1024 + 1280 + 2048
    assert memory.layer_bytes_per_token(shape, fp32) == 1024 + 1024 + 2048
    assert memory.layer_bytes_per_token(shape, RunSettings(dtype="bfloat16")) == 2304


def _easyr1(name: str, gpus: int, *, bf16: bool) -> tuple:
    """EasyR1's examples/config.yaml: FSDP full shard, gradient checkpointing, a micro-batch of 1 row for the
    update, 2048 + 2048 tokens, n = 5, 512 prompts over the GPUs, KL loss (beta 0.01), vLLM at 0.6 of the card
    asleep during the update; "AMP" is fp32 parameters computing in bf16, "BF16" bf16 parameters and AdamW state
    (worker.actor.fsdp.torch_dtype=bf16, optim.strategy=adamw_bf16)."""
    shape = from_config(PUBLISHED[name])
    s = RunSettings(
        gpus=gpus,
        sharding="fsdp",
        dtype="bfloat16" if bf16 else "float32",
        mixed_precision="no" if bf16 else "bf16",
        master_weights=not bf16,
        gradient_checkpointing=True,
        beta=0.01,
        mini_batch_size=1,
        num_generations=5,
        prompts_per_step=512 // gpus,
        prompt_tokens=2048,
        completion_tokens=2048,
        visual_tokens=1024,
        rollout_backend="vllm",
        vllm_gpu_memory_utilization=0.6,
        vllm_sleep=True,
        trainer=EASYR1,
    )
    return shape, s


@pytest.mark.parametrize(
    "name, gpus, memory_gib, bf16",
    [
        ("Qwen/Qwen2.5-VL-7B-Instruct", 8, 40, False),
        ("Qwen/Qwen2.5-VL-32B-Instruct", 8, 80, True),
        ("Qwen/Qwen2.5-VL-72B-Instruct", 16, 80, True),
    ],
)
def test_easyr1_published_hardware_fits(name, gpus, memory_gib, bf16):
    shape, s = _easyr1(name, gpus, bf16=bf16)
    p = plan(shape, s, memory_gib)
    assert p.fits, {k: v / GIB for k, v in p.totals.items()}


def test_7b_full_parameters_on_one_40gb_card_does_not_fit():
    shape, s = _easyr1("Qwen/Qwen2.5-VL-7B-Instruct", 1, bf16=False)
    p = plan(shape, s, 40)
    assert not p.fits and p.peak > 100 * GIB  # 16 B a parameter alone is 124 GiB
    assert not plan(shape, replace(s, gpus=2), 40).fits


def test_today_trainer_shards_the_reference_and_keeps_the_policy_sharded_while_vllm_generates():
    """With this version's placement under FSDP2 (the reference sharded like the policy, no whole-policy gather
    while vLLM generates, the chunked head on the sharded head) the 7B run on 8 x 40 GB misses by the reference
    alone (no offloading while generating, unlike EasyR1): beta 0 makes it fit. The placement before
    (a whole reference on every GPU, the policy gathered for the rollouts, whole logits) needed twice the card."""
    shape, s = _easyr1("Qwen/Qwen2.5-VL-7B-Instruct", 8, bf16=False)
    today = replace(s, trainer=TODAY)
    names = {i.name for i in plan(shape, today, 40).items}
    assert {"reference model (sharded)", "LM head (chunked)"} <= names
    assert not names & {"reference model", "policy gathered for rollouts", "LM head (whole logits)"}
    assert not plan(shape, today, 40).fits
    changes, fixed = what_fits(shape, today, 40)
    assert fixed.fits and changes == ["algorithm.beta=0"]
    before = replace(s, trainer=replace(TODAY, reference="replicated", rollout_gather=True, chunked_sharded_head=False))
    old_names = {i.name for i in plan(shape, before, 40).items}
    assert {"reference model", "policy gathered for rollouts", "LM head (whole logits)"} <= old_names
    assert plan(shape, before, 40).peak > 2 * 40 * GIB


def test_cli_plans_a_recipe_from_the_model_folder(tiny_model_dir, capsys):
    recipe = "configs/quickstart.yaml"
    code = main(["plan", recipe, f"model.name_or_path={tiny_model_dir}", "--cpu", "--gpu-memory", "16", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["fits"] and out["model"]["source"].endswith("config.json")
    assert out["model"]["parameters"] == json.loads((tiny_model_dir / "mmreason_tiny.json").read_text())["parameters"]
    code = main(
        ["plan", recipe, "model.name_or_path=Qwen/Qwen2.5-VL-72B-Instruct", "--gpus", "2", "--gpu-memory", "80"]
    )
    text = capsys.readouterr().out
    assert code == 1 and "FSDP2 over 2" in text and "does not fit" in text


def test_unknown_model_is_one_line():
    with pytest.raises(ValueError, match="model.name_or_path: 'org/unknown'"):
        load_shape("org/unknown")


def test_measured_tiny_update_is_within_a_quarter_of_the_plan(tmp_path, one_torch_thread):
    """One GRPO update of the tiny model (after a warm-up one): peak tensor bytes, forward + backward and the
    AdamW step, within 25 % of the plan."""
    from mmreason.bench.plan_check import check_size
    from mmreason.bench.update_throughput import Workload

    c = check_size("tiny", Workload(2, 64, 96, 128, 8), tmp_path)
    assert 0.75 <= c.update_predicted / c.update_measured <= 1.25
    assert 0.75 <= c.step_predicted / c.step_measured <= 1.25
