"""Where each vLLM engine runs (``rollout/backends/vllm_placement.py``): the colocated engine's place and
arguments per training process (1, 2 and 8 processes, tensor parallel 1 and 2), and a server's engines' devices
within its own ``CUDA_VISIBLE_DEVICES``. Pure functions, and the trainer's and the server's calls of them
through a recording stand-in for vLLM (tests/rollout/recording_vllm.py); no vLLM needed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mmreason.rollout.backends.vllm_engine import VLLMSettings
from mmreason.rollout.backends.vllm_placement import (
    ModelFacts,
    engine_kwargs,
    engine_placement,
    placement_env,
    server_devices,
)
from tests.rollout.recording_vllm import use_recording_vllm


def _places(world: int, per_machine: int, tp: int, on_cpu: bool = False):
    return [
        engine_placement(
            rank=r,
            local_rank=r % per_machine,
            world_size=world,
            local_world_size=per_machine,
            tensor_parallel_size=tp,
            on_cpu=on_cpu,
        )
        for r in range(world)
    ]


@pytest.mark.parametrize(
    ("world", "per_machine", "tp", "devices", "groups"),
    [
        (1, 1, 1, [0], [(0,)]),
        (2, 2, 1, [0, 1], [(0,), (1,)]),
        (2, 2, 2, [0, 1], [(0, 1), (0, 1)]),
        (8, 8, 1, list(range(8)), [(r,) for r in range(8)]),
        (8, 8, 2, list(range(8)), [(0, 1), (0, 1), (2, 3), (2, 3), (4, 5), (4, 5), (6, 7), (6, 7)]),
        (8, 4, 2, [0, 1, 2, 3, 0, 1, 2, 3], [(0, 1), (0, 1), (2, 3), (2, 3), (4, 5), (4, 5), (6, 7), (6, 7)]),
    ],
)
def test_each_process_engine_sits_on_its_local_device_in_consecutive_tp_groups(world, per_machine, tp, devices, groups):
    """Every process's worker on its own local device (never all on device 0); with T = 2 the groups are
    consecutive ranks, one engine per group, every rank once."""
    places = _places(world, per_machine, tp)
    assert [p.device for p in places] == devices
    assert [p.group for p in places] == groups
    assert [p.rank_in_group for p in places] == [r % tp for r in range(world)]
    assert {p.engines for p in places} == {world // tp}
    assert sorted(r for g in set(groups) for r in g) == list(range(world))
    assert all(p.device is None for p in _places(world, per_machine, tp, on_cpu=True))


def test_a_tp_size_that_does_not_tile_the_processes_is_one_line_naming_the_key():
    with pytest.raises(ValueError, match=r"rollout.vllm_tensor_parallel_size=2 must divide") as info:
        _places(3, 3, 2)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="vllm_tensor_parallel_size=2"):  # a group would span two machines
        _places(2, 1, 2)


@pytest.mark.parametrize(("world", "tp"), [(1, 1), (2, 1), (2, 2), (8, 1), (8, 2)])
def test_engine_arguments_per_rank_use_the_external_launcher_and_the_launcher_variables(world, tp):
    """Colocated: vLLM's ``external_launcher`` (the engine in the trainer's process, its device from
    ``LOCAL_RANK``), the group's T, no worker extension (no weights group); the launcher variables are each
    process's own, and a rendezvous the launcher gave is kept."""
    settings = VLLMSettings(tensor_parallel_size=tp, dtype="bfloat16")
    facts = ModelFacts("model", 1024)
    for p in _places(world, world, tp):
        kwargs = engine_kwargs(settings, facts, on_cpu=False, placement=p)
        assert kwargs["distributed_executor_backend"] == "external_launcher"
        assert kwargs["tensor_parallel_size"] == tp and kwargs["dtype"] == "bfloat16"
        assert "worker_extension_cls" not in kwargs
        env = placement_env(p, {}, master_port=29999)
        assert env == {
            "RANK": str(p.rank),
            "LOCAL_RANK": str(p.device),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29999",
        }
        launched = placement_env(p, {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"}, master_port=29999)
        assert "MASTER_ADDR" not in launched and "MASTER_PORT" not in launched
    server = engine_kwargs(VLLMSettings(mode="server"), facts, on_cpu=False)
    assert "distributed_executor_backend" not in server and "worker_extension_cls" in server


def test_the_trainer_builds_each_process_engine_at_its_place(tiny_model_dir, monkeypatch):
    """``make_backend`` on each of 2 processes (accelerate's view of them): each engine built in colocate mode
    with the external launcher and its own RANK / LOCAL_RANK / WORLD_SIZE (today's code built every engine
    with vLLM's defaults: all on device 0)."""
    from mmreason.config import load_config
    from mmreason.models import load_processor
    from mmreason.train.config import TrainConfig
    from mmreason.train.rollout_backend import make_backend

    llm = use_recording_vllm(monkeypatch)
    cfg = load_config(TrainConfig, None, ["rollout.backend=vllm", f"model.name_or_path={tiny_model_dir}"])
    processor = load_processor(tiny_model_dir)
    for rank in range(2):
        acc = SimpleNamespace(
            process_index=rank,
            local_process_index=rank,
            num_processes=2,
            is_main_process=rank == 0,
            unwrap_model=lambda m: m,
            distributed_type=SimpleNamespace(value="MULTI_CPU"),
        )
        run = SimpleNamespace(cfg=cfg, accelerator=acc, model=SimpleNamespace(), processor=processor)
        monkeypatch.setattr("mmreason.train.rollout_backend.lora_rank", lambda run: None)
        make_backend(run)
    assert [e.kwargs.get("distributed_executor_backend") for e in llm.built] == ["external_launcher"] * 2
    assert [(e.env["RANK"], e.env["LOCAL_RANK"], e.env["WORLD_SIZE"]) for e in llm.built] == [
        ("0", "0", "2"),
        ("1", "1", "2"),
    ]


def test_server_engines_take_devices_from_the_servers_own_list():
    """``--data_parallel_size 2 --tensor_parallel_size 2`` on a server given GPUs 4-7: engine 0 on 4,5 and
    engine 1 on 6,7 (not 0..3, the training GPUs); unset: the machine's devices in order."""
    assert [server_devices("4,5,6,7", 8, j, 2, 2) for j in range(2)] == ["4,5", "6,7"]
    assert [server_devices("4,5,6,7", 8, j, 1, 4) for j in range(4)] == ["4", "5", "6", "7"]
    assert [server_devices(None, 4, j, 2, 2) for j in range(2)] == ["0,1", "2,3"]
    assert server_devices("GPU-aa, GPU-bb", 2, 1, 1, 2) == "GPU-bb"  # UUIDs as listed
    with pytest.raises(SystemExit, match=r"--data_parallel_size 2 x --tensor_parallel_size 2 needs 4") as info:
        server_devices("4,5", 8, 0, 2, 2)
    assert "CUDA_VISIBLE_DEVICES=4,5 lists 2" in str(info.value) and "\n" not in str(info.value)


def test_vllm_serve_starts_each_engine_on_its_share_of_its_visible_devices(tiny_model_dir, monkeypatch):
    """``build_engines`` (the server's start) under ``CUDA_VISIBLE_DEVICES=4,5,6,7`` on a GPU machine: the
    engines' processes see 4,5 and 6,7 (today's code: 0,1 and 2,3), and a list too short stops the server
    before any engine loads."""
    import torch

    from mmreason.rollout.backends import vllm_engine
    from mmreason.rollout.backends.vllm_server import build_engines

    seen = []

    class Engine:
        def __init__(self, model_dir, tokenizer, settings, placement=None):
            import os

            seen.append(os.environ.get("CUDA_VISIBLE_DEVICES"))

    monkeypatch.setattr(vllm_engine, "VLLMBackend", Engine)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    args = SimpleNamespace(model=str(tiny_model_dir), data_parallel_size=2, tensor_parallel_size=2)
    build_engines(args, settings=None)
    assert seen == ["4,5", "6,7"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(SystemExit, match="needs 4 GPUs"):
        build_engines(args, settings=None)
    assert seen == ["4,5", "6,7"]  # nothing loaded
