"""The training run's rollout backend (``rollout.backend``): built before the first step, fed the policy's
weights after every optimizer step, closed at the end. ``hf`` needs none of this (``run.rollout_backend``
stays None and ``roll_out`` calls HF ``generate``); ``vllm`` is set up here (docs/vllm.md): a colocated engine,
or with ``rollout.vllm_mode=server`` a client of a ``mmreason vllm-serve`` server on this machine."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

import torch

from mmreason.config import ConfigError
from mmreason.models.loading import resolve_dtype
from mmreason.parallel.agree import any_rank
from mmreason.parallel.sharding import full_state_dict, is_sharded
from mmreason.rollout.backends import EngineDied, EngineDiedAfterUpdate
from mmreason.rollout.backends.vllm_client import VLLMClient, check_calls, check_server, server_info
from mmreason.rollout.backends.vllm_engine import (
    VLLMBackend,
    VLLMSettings,
    check_cpu_linear_attention,
    check_head_size,
    import_vllm,
    processor_kwargs,
)
from mmreason.rollout.backends.vllm_lora import adapter_plan
from mmreason.rollout.backends.vllm_placement import EnginePlacement, engine_placement
from mmreason.rollout.multiturn import episode_context
from mmreason.train.async_rollouts import check_async_config
from mmreason.train.config import TrainConfig

if TYPE_CHECKING:
    from accelerate import Accelerator

    from mmreason.train.setup import Run


def check_backend_config(cfg: TrainConfig) -> None:
    """Raise, before any step, the errors of a run with rollout.backend=vllm (the engine is not built yet)."""
    r = cfg.rollout
    # rollout.async_generation's refusals (train/async_rollouts.py)
    check_async_config(cfg)
    if r.backend != "vllm":
        return

    need = engine_context(cfg)
    if r.vllm_max_model_length is not None and r.vllm_max_model_length < need:
        # prompts over data.max_prompt_length are the counted skips of the prompt builder; every prompt it
        # accepts must fit the engine with its completion (an episode: with all its turns and observations)
        what = (
            "data.max_prompt_length + rollout.max_completion_length"
            if r.max_turns <= 1
            else "the longest episode (prompt, max_turns x max_completion_length, observations of "
            "max_observation_tokens)"
        )
        raise ConfigError(f"rollout.vllm_max_model_length={r.vllm_max_model_length} < {what} = {need}")
    check_engine_settings(cfg, on_cpu=not torch.cuda.is_available())
    # the server's engine is checked where it runs; here only that it answers and fits
    if r.vllm_mode == "server":
        for host, port in server_hosts(cfg):
            info = server_info(host, port, r.vllm_server_timeout, r.vllm_server_api_key)
            check_server(info, host, port, need, _processor_kwargs(cfg))
            check_calls(
                info,
                host,
                port,
                prompts=cfg.prompts_per_step,
                n=r.num_generations,
                max_new_tokens=r.max_completion_length,
                names=("prompts_per_step", "rollout.num_generations", "rollout.max_completion_length"),
            )
        return
    import_vllm()  # one line naming the extra when it is missing
    check_head_size(cfg.model.name_or_path)
    check_cpu_linear_attention(cfg.model.name_or_path, str(resolve_dtype(cfg.model.dtype)).removeprefix("torch."))


def check_engine_settings(cfg: TrainConfig, *, on_cpu: bool) -> None:
    """Refuse the engine settings no test runs end to end before the model loads, each in one line naming the setting
    and what to use instead (docs/vllm.md, "Placement" and "Sleep mode")."""
    r = cfg.rollout
    if r.vllm_mode == "colocate":  # a server's engine is built with the server's own flags
        check_batching(cfg, on_cpu=on_cpu)
    if r.vllm_mode == "colocate" and r.vllm_tensor_parallel_size > 1:
        raise ConfigError(
            f"rollout.vllm_tensor_parallel_size={r.vllm_tensor_parallel_size} in colocate mode: the processes of "
            "a tensor-parallel group would have to sample the same prompts together, which the step and the "
            "in-training eval do not do; use 1 (an engine per process), or rollout.vllm_mode=server with "
            "`mmreason vllm-serve --tensor_parallel_size N`"
        )
    if not r.vllm_enable_sleep_mode:
        return
    if r.vllm_mode == "server":
        why = "applies to colocate mode only (a vllm-serve keeps its own GPUs)"
    elif r.async_generation:
        why = "cannot put the engine to sleep during the update while rollout.async_generation samples in it"
    elif on_cpu:
        why = "needs a GPU (vLLM's CPU build has no sleep mode)"
    else:
        return
    raise ConfigError(f"rollout.vllm_enable_sleep_mode=true {why}; set it false")


def check_batching(cfg: TrainConfig, *, on_cpu: bool) -> None:
    """Refuse, in one line naming the key, the batching settings vLLM would refuse or that break the per-row seeds. One
    is chunked prefill on CPU: a partly prefilled row's seeded generator would have to be rewound, which vLLM's CPU
    generators cannot do. The other is, without chunked prefill, a token budget below the context: a whole prompt must
    fit one scheduling step."""
    r = cfg.rollout
    chunked = (not on_cpu) if r.vllm_enable_chunked_prefill is None else r.vllm_enable_chunked_prefill
    if chunked and on_cpu:
        raise ConfigError(
            "rollout.vllm_enable_chunked_prefill=true needs a GPU: on CPU a partly prefilled row's seeded "
            "generator cannot be rewound; leave it unset (off on CPU)"
        )
    budget, context = r.vllm_max_num_batched_tokens, r.vllm_max_model_length or engine_context(cfg)
    if not chunked and budget is not None and budget < context:
        raise ConfigError(
            f"rollout.vllm_max_num_batched_tokens={budget} < the engine's context {context} without chunked "
            "prefill (a whole prompt is scheduled at once): raise it, leave it unset, or turn "
            "rollout.vllm_enable_chunked_prefill on (GPU)"
        )


def server_hosts(cfg: TrainConfig) -> list[tuple[str, int]]:
    """List every server of a server-mode run: ``vllm_server_host:vllm_server_port``, then ``vllm_server_hosts``."""
    from mmreason.rollout.backends.vllm_client import parse_hosts

    r = cfg.rollout
    try:
        more = parse_hosts(r.vllm_server_hosts)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return [
        (r.vllm_server_host, r.vllm_server_port),
        *[h for h in more if h != (r.vllm_server_host, r.vllm_server_port)],
    ]


def engine_context(cfg: TrainConfig) -> int:
    """Return the context the engine must hold: a prompt and its completion, or the longest episode of a run with an
    environment (``rollout.multiturn.episode_context``, as the trainer bounds it)."""
    r = cfg.rollout
    if r.max_turns <= 1:
        return cfg.data.max_prompt_length + r.max_completion_length
    return episode_context(cfg.data.max_prompt_length, r.max_turns, r.max_completion_length, r.max_observation_tokens)


def _processor_kwargs(cfg: TrainConfig) -> dict | None:
    return processor_kwargs(cfg.data.min_pixels, cfg.data.max_pixels)


def make_backend(run: Run) -> VLLMBackend | VLLMClient | None:
    """Make the run's vLLM engine (or server client), or None for ``rollout.backend: hf``."""
    cfg = run.cfg
    r = cfg.rollout
    if r.backend != "vllm":
        return None
    if r.vllm_mode == "server":
        check_server_sharding(run)
        return server_client(run)

    # with more processes each builds an engine of its own (TRL's colocate)
    check_colocate_sharding(run)
    settings = engine_settings(cfg, lora_rank=lora_rank(run))
    return VLLMBackend(cfg.model.name_or_path, run.processor.tokenizer, settings, placement_of(run.accelerator, cfg))


def server_client(run: Run) -> VLLMClient:
    """Build server mode's client on this process. The main process pushes (through the servers' weights groups with
    ``vllm_weight_sync=collective``); under FSDP2 with more processes every process pushes with it, gathering each
    tensor whole once, the main one casting it to the engines' dtype and broadcasting it, the others only taking part in
    the gathers (``VLLMClient.gathers_only``): no whole state dict, no file. Where the main process cannot join the
    groups (no vLLM here, a server without them), the sharded model is gathered whole on every process and written to
    the servers' folders instead."""
    cfg, acc = run.cfg, run.accelerator
    r = cfg.rollout
    hosts = server_hosts(cfg)
    client = VLLMClient(
        *hosts[0],
        run.processor.tokenizer,
        api_key=r.vllm_server_api_key,
        server_timeout=r.vllm_server_timeout,
        weight_sync_timeout=r.vllm_weight_sync_timeout,
        generate_timeout=r.vllm_generate_timeout,
        hosts=hosts[1:],
        weight_sync="collective" if r.vllm_weight_sync == "collective" and acc.is_main_process else "directory",
        sync_bucket_mb=r.vllm_sync_bucket_mb,
    )
    if acc.num_processes > 1 and is_sharded(acc.unwrap_model(run.model)):
        streams = any_rank(acc, acc.is_main_process and client.weight_group is not None)  # the main one's say
        # every process calls sync_weights: the gathers are the whole mesh's
        client.per_process = streams
        client.gathers_only = streams and not acc.is_main_process
    return client


def engine_settings(cfg: TrainConfig, *, lora_rank: int | None = None) -> VLLMSettings:
    """Build the colocated engine's settings from the run's config. Its dtype is the configured load dtype
    (``model.dtype``), never a live parameter's: accelerate upcasts those to fp32 under FSDP2, which would build a 7B
    engine in fp32."""
    r = cfg.rollout
    return VLLMSettings(
        mode=r.vllm_mode,
        gpu_memory_utilization=r.vllm_gpu_memory_utilization,
        enable_sleep_mode=r.vllm_enable_sleep_mode,
        max_model_length=r.vllm_max_model_length or engine_context(cfg),
        tensor_parallel_size=r.vllm_tensor_parallel_size,
        kv_cache_gib=r.vllm_kv_cache_gib,
        seed=cfg.seed,
        processor_kwargs=_processor_kwargs(cfg),
        weight_sync_timeout=r.vllm_weight_sync_timeout,
        generate_timeout=r.vllm_generate_timeout,
        dtype=load_dtype(cfg),
        weight_sync=r.vllm_weight_sync,
        sync_bucket_mb=r.vllm_sync_bucket_mb,
        lora_rank=lora_rank,
        # TRL's colocate engine takes the rows one generation samples per process (docs/vllm.md "Batching")
        max_num_seqs=r.vllm_max_num_seqs or cfg.prompts_per_step * r.num_generations,
        max_num_batched_tokens=r.vllm_max_num_batched_tokens,
        enable_chunked_prefill=r.vllm_enable_chunked_prefill,
    )


def load_dtype(cfg: TrainConfig) -> str:
    """Resolve ``model.dtype`` as the loader resolves it (``auto``: bf16 on a GPU that has it, else fp32), by name
    (``bfloat16``)."""
    return str(resolve_dtype(cfg.model.dtype)).removeprefix("torch.")


def placement_of(acc: Accelerator, cfg: TrainConfig) -> EnginePlacement:
    """Return this process's colocated engine placement (``vllm_placement.engine_placement``) from accelerate's view of
    it; ``LOCAL_WORLD_SIZE`` (set by torchrun / accelerate launch) is its machine's process count."""
    try:
        return engine_placement(
            rank=acc.process_index,
            local_rank=acc.local_process_index,
            world_size=acc.num_processes,
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", acc.num_processes)),
            tensor_parallel_size=cfg.rollout.vllm_tensor_parallel_size,
            on_cpu=not torch.cuda.is_available(),
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def lora_rank(run: Run) -> int | None:
    """Return the engine's LoRA rank when the policy's LoRA is served as an adapter (``rollout.vllm_lora: adapter`` and
    vLLM can; ``vllm_lora.adapter_plan``), else None: merged pushes, with one line saying why."""

    model = run.accelerator.unwrap_model(run.model)
    plan, why = adapter_plan(model, run.cfg.model.name_or_path, sharded=is_sharded(model))
    if plan is not None and run.cfg.rollout.vllm_lora == "adapter":
        return plan.max_lora_rank
    if why and run.cfg.rollout.vllm_lora == "adapter" and run.accelerator.is_main_process:
        print(f"rollout.vllm_lora=adapter: {why}; the engine gets the merged weights")
    return None


def check_colocate_sharding(run: Run) -> None:
    """Check the sharding for colocate mode with more than one process: every process pushes to its own engine, so a
    sharded model must reach each whole. The collective push gathers it tensor by tensor on every process; the directory
    path gathers it on the main process only, so that pairing is refused before any step."""
    acc = run.accelerator
    if (
        acc.num_processes > 1
        and run.cfg.rollout.vllm_weight_sync == "directory"
        and (is_sharded(acc.unwrap_model(run.model)) or acc.distributed_type.value == "FSDP")
    ):
        raise ConfigError(
            "rollout.vllm_mode=colocate with a sharded model and more than one process needs "
            "rollout.vllm_weight_sync=collective (each process's engine takes the whole model)"
        )


def check_server_sharding(run: Run) -> None:
    """Check the sharding for server mode, which pushes the whole policy from the main process. An FSDP2 model (torch
    ``fully_shard``) is gathered one tensor at a time by every process (``server_client``; through a folder: whole
    first, ``mmreason.parallel.sharding.full_state_dict``); the shardings it cannot gather whole are refused before any
    step: FSDP1 wrappers, and a LoRA adapter on a sharded model (its merge needs the whole base weights). DeepSpeed
    never gets here (``train/launch_checks.py``)."""
    acc = run.accelerator
    kind = acc.distributed_type.value
    inner = acc.unwrap_model(run.model)
    if kind == "FSDP" and not is_sharded(inner):
        why = "FSDP1 wraps the model (only FSDP2, fsdp_version: 2, is gathered)"
    elif is_sharded(inner) and hasattr(inner, "merge_adapter"):
        why = "a LoRA adapter on a sharded model is not merged for the push"
    else:
        return
    raise ConfigError(
        f"rollout.vllm_mode=server: {why}, so the weight push would write the main process's "
        "shard only; use DDP, FSDP2 with full fine-tuning, or rollout.backend=hf"
    )


def sync_weights(run: Run, after_update: bool = True) -> dict[str, float]:
    """Push the policy to the engine: ``time/weight_sync`` is the seconds it took. After an optimizer step
    (``after_update``) an engine that dies or times out taking the weights is ``EngineDiedAfterUpdate``: the
    step is finished and is saved as itself. The push at the start (a resumed run, or a server that holds
    some other weights) raises plain ``EngineDied``."""
    backend = getattr(run, "rollout_backend", None)
    # hf; asynchronous generation's policy copy takes the weights (train/async_rollouts.py)
    if backend is None:
        producer = getattr(run, "async_rollouts", None)
        return producer.push_copy(run.accelerator.unwrap_model(run.model)) if producer and after_update else {}
    acc = run.accelerator
    t = time.perf_counter()
    error: EngineDied | None = None
    model = acc.unwrap_model(run.model)
    # directory: a sharded (FSDP2) model is gathered whole first (every process; the main one holds it all);
    # colocated in-process push, or servers' weights groups: the backend gathers one tensor at a time (with
    # servers, every process of a sharded model calls it: the main one sends, the others only gather)
    streams = getattr(backend, "streams_weights", False) or getattr(backend, "weight_group", None) is not None
    whole = None if streams else full_state_dict(model)
    # colocate: every process pushes to its own engine; server mode with more processes: one server, one push
    if acc.is_main_process or acc.num_processes == 1 or getattr(backend, "per_process", False):
        try:
            backend.sync_weights(model, whole)
        except EngineDied as exc:
            error = exc
        # e.g. a full disk: with more processes every one must stop (and save) together
        except Exception as exc:
            if acc.num_processes == 1:
                raise
            error = EngineDied(f"the weight push failed: {exc!r}")
    if acc.num_processes > 1:
        # also the barrier: no process samples the next step before the server holds the new weights
        if any_rank(acc, error is not None) and error is None:
            error = EngineDied("another process's weight push failed (its log names the engine or server)")
    if error is not None:
        if not after_update or isinstance(error, EngineDiedAfterUpdate):
            raise error
        raise EngineDiedAfterUpdate(str(error)) from error
    out = {"time/weight_sync": time.perf_counter() - t}
    producer = run.async_rollouts  # asynchronous generation: how long the push waited
    return {**out, **producer.metrics_after_push()} if producer is not None and after_update else out


def push_at_start(cfg: TrainConfig, resumed: bool) -> bool:
    """Tell whether the engine takes the policy's weights before the first step: a resumed run's engine starts from the
    model directory, not the checkpoint (nor ``model.adapter``), and a server may hold any weights."""
    # model.adapter: the policy is the model directory plus an adapter the engine has not seen
    return cfg.rollout.backend == "vllm" and (resumed or cfg.rollout.vllm_mode == "server" or bool(cfg.model.adapter))


def close_backend(run: Run) -> None:
    backend = getattr(run, "rollout_backend", None)
    producer = getattr(run, "async_rollouts", None)
    # asynchronous generation: its thread stops before the engine
    if producer is not None:
        producer.close()
    if backend is not None:
        # with asynchronous generation: its producer's thread first (train/async_rollouts.py)
        backend.close()
        run.rollout_backend = None


def rest_engine(run: Run) -> None:
    """Rest the engine once the step's rollouts are done: a colocated engine with ``rollout.vllm_enable_sleep_mode``
    gives its GPU memory back for the update (``vllm_sleep.py``; it wakes its weights for the push, its KV cache for the
    next generate call)."""
    backend = getattr(run, "rollout_backend", None)
    if backend is not None and run.cfg.rollout.vllm_enable_sleep_mode:
        backend.sleep()
