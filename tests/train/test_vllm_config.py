"""rollout.backend=vllm: the config knobs and the errors a run raises before any step (no engine needed)."""

from __future__ import annotations

import importlib.util

import pytest

from mmreason.config import ConfigError, load_config
from mmreason.train.config import TrainConfig
from mmreason.train.rollout_backend import check_backend_config

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_backend_knobs_use_trl_names_and_bad_values_fail():
    cfg = load_config(
        TrainConfig,
        None,
        [
            "rollout.backend=vllm",
            "rollout.vllm_mode=colocate",
            "rollout.vllm_gpu_memory_utilization=0.5",
            "rollout.vllm_enable_sleep_mode=true",
            "rollout.vllm_max_model_length=4096",
            "rollout.vllm_tensor_parallel_size=2",
            "rollout.vllm_importance_sampling_mode=sequence_mask",
        ],
    )
    assert cfg.rollout.backend == "vllm" and cfg.rollout.vllm_tensor_parallel_size == 2
    with pytest.raises(ConfigError, match="rollout.backend"):
        load_config(TrainConfig, None, ["rollout.backend=sglang"])
    with pytest.raises(ConfigError, match="vllm_mode"):
        load_config(TrainConfig, None, ["rollout.vllm_mode=remote"])
    with pytest.raises(ConfigError, match="vllm_importance_sampling_mode"):
        load_config(TrainConfig, None, ["rollout.vllm_importance_sampling_mode=token_clip"])


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here")
def test_missing_vllm_is_one_line_naming_the_extra(tiny_model_dir):
    from mmreason.rollout.backends.vllm_engine import VLLMUnavailable

    cfg = load_config(TrainConfig, None, ["rollout.backend=vllm", f"model.name_or_path={tiny_model_dir}"])
    with pytest.raises(VLLMUnavailable) as info:
        check_backend_config(cfg)
    assert "mmreason[vllm]" in str(info.value) and "\n" not in str(info.value)


def test_unsupported_head_size_fails_before_any_step(tmp_path):
    """A model with 16-wide heads (hidden 64, 4 heads) cannot run on vLLM's CPU attention."""
    from transformers import AutoConfig

    from mmreason.rollout.backends.vllm_engine import check_head_size, text_head_dim

    ok = tmp_path / "ok"
    ok.mkdir()
    config = AutoConfig.for_model(
        "qwen2_5_vl", text_config={"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
    )
    config.save_pretrained(ok)
    assert text_head_dim(ok) == 16
    with pytest.raises(ValueError, match="head_dim=16"):
        check_head_size(ok, on_cpu=True)
    check_head_size(ok, on_cpu=False)  # CUDA attention takes it


def test_the_tiny_model_has_a_head_size_vllm_cpu_accepts(tiny_model_dir):
    from mmreason.rollout.backends.vllm_engine import CPU_HEAD_SIZES, text_head_dim

    assert text_head_dim(tiny_model_dir) in CPU_HEAD_SIZES


def test_engine_context_must_hold_every_accepted_prompt_and_its_completion():
    """Prompts over data.max_prompt_length are skipped and counted by the prompt builder; the engine's context
    must hold the rest: 512 + 256 = 768 > 700."""
    cfg = load_config(
        TrainConfig,
        None,
        [
            "rollout.backend=vllm",
            "data.max_prompt_length=512",
            "rollout.max_completion_length=256",
            "rollout.vllm_max_model_length=700",
        ],
    )
    with pytest.raises(ConfigError, match="vllm_max_model_length=700 < .* = 768"):
        check_backend_config(cfg)


def test_multiturn_runs_are_accepted_and_the_engine_holds_the_longest_episode():
    """max_turns 3, prompt 512, turns of 40, observations of at most 256 tokens: an episode reaches
    512 + 3 x 40 + 2 x 256 = 1144 tokens, the engine's default context; a smaller one fails before any step."""
    from mmreason.train.rollout_backend import engine_context

    overrides = [
        "rollout.backend=vllm",
        "data.max_prompt_length=512",
        "rollout.max_completion_length=40",
        "rollout.max_turns=3",
        "rollout.max_observation_tokens=256",
    ]
    assert engine_context(load_config(TrainConfig, None, overrides)) == 1144
    assert engine_context(load_config(TrainConfig, None, overrides[:3])) == 552  # one turn: prompt + completion
    with pytest.raises(ConfigError, match="vllm_max_model_length=1000 < the longest episode .* = 1144"):
        check_backend_config(load_config(TrainConfig, None, [*overrides, "rollout.vllm_max_model_length=1000"]))


def test_a_vllm_server_that_is_not_there_is_one_line_naming_host_and_port_before_any_step(tmp_path, capsys):
    """rollout.vllm_mode=server with nobody at the port: the run waits vllm_server_timeout (1 s) and stops with
    one line naming host:port and how to start a server; no step ran (no metrics, no checkpoint)."""
    import socket
    from pathlib import Path

    from mmreason.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nobody listens there
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    code = main(
        [
            "train",
            str(root / "configs" / "quickstart.yaml"),
            f"output_dir={out}",
            "rollout.backend=vllm",
            "rollout.vllm_mode=server",
            f"rollout.vllm_server_port={port}",
            "rollout.vllm_server_timeout=1",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"no vLLM server answered at 127.0.0.1:{port}" in err and "mmreason vllm-serve" in err
    assert not (out / "metrics.jsonl").exists() and not list(out.glob("checkpoint-*"))


@pytest.mark.parametrize(
    "kind, refused",
    [
        ("MULTI_CPU", None),
        ("MULTI_GPU", None),
        ("FSDP", "FSDP1 wraps the model"),
    ],
)
def test_server_mode_refuses_shardings_whose_push_would_be_one_shard(tiny, kind, refused):
    """Server mode pushes from the main process: an FSDP1 wrapper (the model is not an FSDP2 module that
    ``full_state_dict`` gathers) is refused before any step; DDP holds whole weights. (FSDP2 itself, gathered,
    runs in tests/rollout_vllm/test_vllm_server.py; DeepSpeed is refused at start-up, tests/train/test_launch_checks.py.)"""
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from mmreason.train.rollout_backend import check_server_sharding

    model, _ = tiny
    acc = SimpleNamespace(distributed_type=DistributedType(kind), unwrap_model=lambda m: m)
    run = SimpleNamespace(accelerator=acc, model=model)
    if refused is None:
        check_server_sharding(run)
    else:
        with pytest.raises(ConfigError, match=f"rollout.vllm_mode=server: {refused}.*main process's shard only"):
            check_server_sharding(run)


def test_vllm_lora_is_adapter_or_merged():
    assert load_config(TrainConfig, None, []).rollout.vllm_lora == "adapter"
    assert load_config(TrainConfig, None, ["rollout.vllm_lora=merged"]).rollout.vllm_lora == "merged"
    with pytest.raises(ConfigError, match="rollout.vllm_lora"):
        load_config(TrainConfig, None, ["rollout.vllm_lora=fused"])


def test_linear_attention_layers_need_bf16_and_64_or_128_wide_heads_on_vllms_cpu_build(tmp_path):
    """vLLM 0.32's CPU kernel for Qwen3.5's gated-delta-net layers asserts bf16 and 64- or 128-wide heads on the
    first generate (and the engine dies): anything else is refused before any step; full-attention models and
    GPUs are not concerned."""
    from transformers import AutoConfig

    from mmreason.rollout.backends.vllm_engine import check_cpu_linear_attention, is_hybrid

    AutoConfig.for_model("qwen3_5").save_pretrained(tmp_path / "qwen3_5")  # the hub's shape: 128-wide heads
    AutoConfig.for_model("qwen3_5", text_config={"linear_key_head_dim": 32}).save_pretrained(tmp_path / "narrow")
    AutoConfig.for_model("qwen3_vl").save_pretrained(tmp_path / "qwen3_vl")
    assert is_hybrid(tmp_path / "qwen3_5") and not is_hybrid(tmp_path / "qwen3_vl")
    for dtype in ("float32", None):
        with pytest.raises(ValueError, match="bfloat16 only, not float32"):
            check_cpu_linear_attention(tmp_path / "qwen3_5", dtype, on_cpu=True)
    check_cpu_linear_attention(tmp_path / "qwen3_5", "bfloat16", on_cpu=True)
    with pytest.raises(ValueError, match="64- or 128-wide heads only, not 32/128"):
        check_cpu_linear_attention(tmp_path / "narrow", "bfloat16", on_cpu=True)
    check_cpu_linear_attention(tmp_path / "narrow", "float32", on_cpu=False)
    check_cpu_linear_attention(tmp_path / "qwen3_vl", "float32", on_cpu=True)
