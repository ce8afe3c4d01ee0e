"""What the trainer asks of its colocated vLLM engine, checked with a recording stand-in for vLLM
(tests/rollout/recording_vllm.py; no vLLM needed): the push goes through the engine's worker in this process,
never through a process group; the engine is built in the configured load dtype, not a live parameter's; with
``rollout.vllm_enable_sleep_mode`` the engine sleeps through each update and wakes in TRL's order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from mmreason.config import ConfigError, load_config
from mmreason.train.config import TrainConfig
from tests.rollout.recording_vllm import use_recording_vllm


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    """The tiny model in fp32 (what accelerate leaves of a bf16 load under FSDP2) and its processor."""
    from mmreason.models import ModelConfig, load_model, load_processor

    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False)
    return model, load_processor(tiny_model_dir)


def _run(tiny_model_dir, tiny, *overrides):
    model, processor = tiny
    cfg = load_config(TrainConfig, None, ["rollout.backend=vllm", f"model.name_or_path={tiny_model_dir}", *overrides])
    acc = SimpleNamespace(
        process_index=0,
        local_process_index=0,
        num_processes=1,
        is_main_process=True,
        unwrap_model=lambda m: m,
        distributed_type=SimpleNamespace(value="NO"),
    )
    return SimpleNamespace(cfg=cfg, accelerator=acc, model=model, processor=processor, async_rollouts=None)


def test_the_colocated_push_loads_the_policys_tensors_in_process_and_builds_no_group(tiny_model_dir, tiny, monkeypatch):
    """The engine joins no weights group (NCCL refuses one whose two ranks share a GPU) and a push hands the
    worker every policy tensor, as the trainer holds it, through ``reload_weights`` in this process."""
    from mmreason.rollout.backends import weight_group
    from mmreason.rollout.backends.weight_group import policy_tensors
    from mmreason.train.rollout_backend import make_backend, sync_weights

    def no_group(*args, **kwargs):
        raise AssertionError("the colocated engine built a process group")

    monkeypatch.setattr(weight_group, "join_group", no_group)
    monkeypatch.setattr(weight_group, "broadcast", no_group)
    llm = use_recording_vllm(monkeypatch)
    run = _run(tiny_model_dir, tiny)
    run.rollout_backend = make_backend(run)
    assert run.rollout_backend.weight_group is None
    assert "worker_extension_cls" not in llm.built[0].kwargs
    assert "time/weight_sync" in sync_weights(run)
    engine = llm.built[0]
    assert [c[0] for c in engine.calls] == ["push"]  # no join, no receive RPC: one in-process reload
    with policy_tensors(run.model) as tensors:
        assert [n for n, _ in engine.loaded] == [n for n, _ in tensors]
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(engine.loaded, tensors))


def test_the_engine_dtype_is_the_configured_load_dtype_not_a_live_parameters(tiny_model_dir, tiny, monkeypatch):
    """``model.dtype=bfloat16`` with fp32 parameters in the trainer (accelerate's FSDP2 upcast): the engine is
    built in bf16 (today's code read the parameter and built it in fp32)."""
    from mmreason.train.rollout_backend import make_backend

    llm = use_recording_vllm(monkeypatch)
    run = _run(tiny_model_dir, tiny, "model.dtype=bfloat16")
    assert next(run.model.parameters()).dtype == torch.float32
    make_backend(run)
    assert llm.built[0].kwargs["dtype"] == "bfloat16"


def test_sleep_mode_sleeps_through_each_update_and_wakes_weights_before_the_push(tiny_model_dir, tiny, monkeypatch):
    """Two steps of generate -> update -> push (the step's own ``update``, its optimizer step recorded): the
    engine sleeps after each step's generation (level 2: every wake of the weights is followed by a full push),
    wakes its weights before the push and its KV cache before the next generation (today: no sleep at all)."""
    from mmreason.rollout.generate import GenerationSettings
    from mmreason.rollout.prompts import build_prompt
    from mmreason.train import step as step_module
    from mmreason.train.rollout_backend import make_backend
    from mmreason.types import Sample

    llm = use_recording_vllm(monkeypatch)
    run = _run(tiny_model_dir, tiny, "rollout.vllm_enable_sleep_mode=true")
    run.rollout_backend = make_backend(run)
    engine = llm.built[0]
    monkeypatch.setattr(step_module, "policy_update", lambda run, table: engine.calls.append(("update",)) or {})
    prompt = build_prompt(tiny[1], Sample(id="q", messages=[{"role": "user", "content": "Hi?"}]), max_prompt_length=64)
    settings = GenerationSettings(max_new_tokens=4, temperature=1.0)
    for step in (1, 2):
        got = run.rollout_backend.generate_groups([prompt], [0], 2, settings, [step])
        assert len(got) == 2
        step_module.update(run, table=None)
    pushes = len(engine.loaded)
    assert engine.calls == [
        ("generate", 2),
        ("sleep", 2),
        ("update",),
        ("wake_up", ("weights",)),
        ("push", pushes),
        ("wake_up", ("kv_cache",)),
        ("generate", 2),
        ("sleep", 2),
        ("update",),
        ("wake_up", ("weights",)),
        ("push", pushes),
    ]


def test_a_level_2_sleep_never_samples_weights_that_were_dropped():
    from mmreason.rollout.backends.vllm_sleep import EngineSleep

    calls = []
    llm = SimpleNamespace(sleep=lambda level: calls.append(("sleep", level)), wake_up=lambda tags: calls.append(tags))
    sleeper = EngineSleep(llm, enabled=True)
    sleeper.after_generation()
    with pytest.raises(RuntimeError, match="no weight push since"):
        sleeper.before_generation()
    kept = EngineSleep(llm, enabled=True, keeps_base=True)  # a LoRA adapter push keeps the base weights: level 1
    kept.after_generation()
    kept.before_generation()
    assert calls[-3:] == [("sleep", 1), ["weights"], ["kv_cache"]]


@pytest.mark.parametrize(
    ("overrides", "on_cpu", "message"),
    [
        (["rollout.vllm_enable_sleep_mode=true"], True, "needs a GPU"),
        (["rollout.vllm_enable_sleep_mode=true", "rollout.async_generation=true"], False, "async_generation"),
        (["rollout.vllm_enable_sleep_mode=true", "rollout.vllm_mode=server"], False, "colocate mode only"),
        (["rollout.vllm_tensor_parallel_size=2"], False, "vllm_mode=server"),
    ],
)
def test_engine_settings_no_test_runs_are_refused_in_one_line(overrides, on_cpu, message):
    from mmreason.train.rollout_backend import check_engine_settings

    cfg = load_config(TrainConfig, None, ["rollout.backend=vllm", *overrides])
    with pytest.raises(ConfigError, match=message) as info:
        check_engine_settings(cfg, on_cpu=on_cpu)
    assert "\n" not in str(info.value) and str(info.value).startswith("rollout.vllm_")
    check_engine_settings(load_config(TrainConfig, None, ["rollout.backend=vllm"]), on_cpu=on_cpu)
