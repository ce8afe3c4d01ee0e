"""Where a vLLM engine runs and what it is built with, as pure functions the trainer and the tests call alike
(docs/vllm.md, "Placement").

Colocate mode builds one engine per training process *inside* that process, with vLLM's ``external_launcher``
executor (TRL's colocate mode does the same): no engine-core process, no worker process; the engine's worker
is the trainer's own process, on the device that process trains on (``LOCAL_RANK``). With
``tensor_parallel_size`` T > 1 the T consecutive processes ``g*T .. g*T+T-1`` are the T workers of one engine
(vLLM cuts its tensor-parallel groups from the launcher's world in that order): every process of the group
drives the engine with the group's prompts, gathered, and keeps its own share of the rows. vLLM reads each
process's place from the launcher's variables; ``placement_env`` gives them, so a process started without a
launcher (one process, ``mmreason train``) gets a world of one.

Server mode (``mmreason vllm-serve``) keeps vLLM's own executor: engine ``j`` of ``--data_parallel_size K``
takes the ``tensor_parallel_size`` devices ``j*T .. j*T+T-1`` *of the server's own* ``CUDA_VISIBLE_DEVICES``
(``server_devices``), never the machine's first ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

COLOCATE_EXECUTOR = "external_launcher"
# TRL's colocate engine's max_num_batched_tokens (engine_batching)
COLOCATE_BATCHED_TOKENS = 4096
# the engine-wide logits processor that masks the vision specials, and where its token ids travel
SUPPRESS_PROCESSOR = "mmreason.rollout.backends.vllm_suppress:SuppressTokens"
SUPPRESS_KEY = "mmreason_suppressed_token_ids"


@dataclass(frozen=True)
class EnginePlacement:
    """One training process's place in colocate mode: its global ``rank`` of ``world_size``, its ``local_rank``
    on its machine, the ``tensor_parallel_size`` T of the engines, and the CUDA ``device`` index its engine's
    worker runs on (None on CPU)."""

    rank: int
    local_rank: int
    world_size: int
    tensor_parallel_size: int
    device: int | None

    @property
    def group(self) -> tuple[int, ...]:
        """Return the global ranks that are the workers of this process's engine (T consecutive ranks)."""
        first = self.rank - self.rank % self.tensor_parallel_size
        return tuple(range(first, first + self.tensor_parallel_size))

    @property
    def rank_in_group(self) -> int:
        return self.rank % self.tensor_parallel_size

    @property
    def engine_index(self) -> int:
        return self.rank // self.tensor_parallel_size

    @property
    def engines(self) -> int:
        return self.world_size // self.tensor_parallel_size


def engine_placement(
    *, rank: int, local_rank: int, world_size: int, local_world_size: int, tensor_parallel_size: int, on_cpu: bool
) -> EnginePlacement:
    """Return the colocated engine's place for one training process (accelerate's ``process_index``, ``local_process_index``,
    ``num_processes`` and processes per machine). ValueError, naming ``rollout.vllm_tensor_parallel_size``, when the
    engines cannot tile the processes: T must divide the processes of every machine (an engine's workers share one
    machine, as its tensor-parallel all-reduces assume)."""
    tp = int(tensor_parallel_size)
    if tp < 1:
        raise ValueError(f"rollout.vllm_tensor_parallel_size={tp}: must be >= 1")
    if world_size % tp or local_world_size % tp:
        raise ValueError(
            f"rollout.vllm_tensor_parallel_size={tp} must divide the training processes of each machine "
            f"({local_world_size} here, {world_size} in all): in colocate mode T consecutive processes are one "
            "engine's workers; use a divisor, or rollout.vllm_mode=server"
        )
    if not (0 <= rank < world_size and 0 <= local_rank < local_world_size):
        raise ValueError(f"process {rank} (local {local_rank}) is outside its world of {world_size}")
    return EnginePlacement(rank, local_rank, world_size, tp, None if on_cpu else local_rank)


def placement_env(placement: EnginePlacement, environ: Mapping[str, str], *, master_port: int) -> dict[str, str]:
    """Return the launcher variables vLLM's ``external_launcher`` reads, for ``placement``: ``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE`` always (they must be the trainer's); ``MASTER_ADDR`` / ``MASTER_PORT`` only where ``environ`` has
    none (a process started without a launcher; with one, the trainer's rendezvous is used)."""
    env = {
        "RANK": str(placement.rank),
        "LOCAL_RANK": str(placement.local_rank),
        "WORLD_SIZE": str(placement.world_size),
    }
    if not environ.get("MASTER_ADDR"):
        env["MASTER_ADDR"] = "127.0.0.1"
    if not environ.get("MASTER_PORT"):
        env["MASTER_PORT"] = str(master_port)
    return env


@dataclass(frozen=True)
class ModelFacts:
    """What the engine's arguments need to know of the checkpoint: its directory, the context, whether its
    decoder mixes linear-attention layers in (no prefix caching without chunked prefill)."""

    model_dir: str
    max_model_len: int
    hybrid: bool = False


def engine_kwargs(
    settings: Any,
    facts: ModelFacts,
    *,
    on_cpu: bool,
    placement: EnginePlacement | None = None,
    suppressed: Sequence[int] = (),
) -> dict:
    """Build the keyword arguments of ``vllm.LLM`` for ``settings`` (``VLLMSettings``): colocate mode with its
    ``placement`` (``external_launcher``, the group's T, the seed its group shares), server mode (None) with vLLM's own
    executor. The dtype is ``settings.dtype``, the configured load dtype (``model.dtype``), never a live parameter's
    (accelerate upcasts those to fp32 under FSDP2). ``suppressed``: the token ids the engine never samples (the vision
    specials), masked by one engine-wide logits processor (``vllm_suppress.py``) instead of a vocabulary-sized
    ``allowed_token_ids`` list on every request. The batching arguments are ``engine_batching``'s."""
    kwargs: dict = dict(
        model=facts.model_dir,
        max_model_len=facts.max_model_len,
        # every worker of an engine the same (each row also has its own seed)
        seed=settings.seed,
        **engine_batching(settings, facts.max_model_len, on_cpu=on_cpu),
        limit_mm_per_prompt={"image": settings.limit_images, "video": settings.limit_videos},
        tensor_parallel_size=settings.tensor_parallel_size,
        # a hybrid decoder's (Qwen3.5's linear-attention layers) prefix caching needs chunked prefill in vLLM
        enable_prefix_caching=not facts.hybrid,
        logprobs_mode="processed_logprobs",  # after temperature and the banned tokens, as the trainer's
        # the configured load dtype; unset: fp32 on CPU, the checkpoint's own on GPUs
        dtype=settings.dtype or ("float32" if on_cpu else "auto"),
    )
    if suppressed:
        kwargs["logits_processors"] = [SUPPRESS_PROCESSOR]
        kwargs["additional_config"] = {SUPPRESS_KEY: sorted(int(i) for i in suppressed)}
    if placement is not None:
        if placement.tensor_parallel_size != settings.tensor_parallel_size:
            raise ValueError("the placement's tensor_parallel_size differs from the engine's")
        kwargs["distributed_executor_backend"] = COLOCATE_EXECUTOR
    if settings.processor_kwargs:
        kwargs["mm_processor_kwargs"] = dict(settings.processor_kwargs)
    if settings.lora_rank:  # only the adapter is pushed (vllm_lora.py)
        kwargs.update(enable_lora=True, max_lora_rank=settings.lora_rank, max_loras=1)
    elif settings.weight_sync == "collective" and placement is None:
        from mmreason.rollout.backends.weight_group import WORKER_EXTENSION

        kwargs["worker_extension_cls"] = WORKER_EXTENSION  # a server's workers join a client's weights group
    if on_cpu:
        kwargs["enforce_eager"] = True
    else:
        kwargs.update(
            gpu_memory_utilization=settings.gpu_memory_utilization, enable_sleep_mode=settings.enable_sleep_mode
        )
    return kwargs


def engine_batching(settings: Any, max_model_len: int, *, on_cpu: bool) -> dict:
    """Size ``max_num_seqs``, ``max_num_batched_tokens`` and ``enable_chunked_prefill`` as the peers' colocate modes
    size them (docs/vllm.md, "Batching"), each overridable (``settings.max_num_seqs`` ..., None: this default):

    - chunked prefill on with a GPU (vLLM's own default, which TRL's colocate engine keeps; verl turns it on),
      off on CPU: a partly prefilled request's sampled token is discarded and its seeded generator rewound,
      which vLLM's CPU generators cannot do, so there whole prompts are scheduled at once;
    - ``max_num_batched_tokens`` 4096 with chunked prefill (TRL's colocate value: a larger budget makes vLLM's
      start-up memory profile reserve activations for a forward of that many tokens, leaving the KV cache too
      little of a 0.3 share); without it a whole prompt must fit one step, so the context, at least 4096;
    - ``max_num_seqs``: the rows one call samples when the trainer says (TRL: the per-device batch times the
      steps per generation), at most the token budget (vLLM's bound); None leaves vLLM's own default."""
    chunked = settings.enable_chunked_prefill
    chunked = (not on_cpu) if chunked is None else bool(chunked)
    budget = settings.max_num_batched_tokens
    if budget is None:
        budget = COLOCATE_BATCHED_TOKENS if chunked else max(max_model_len, COLOCATE_BATCHED_TOKENS)
    out = {"enable_chunked_prefill": chunked, "max_num_batched_tokens": int(budget)}
    if settings.max_num_seqs is not None:  # vLLM refuses more rows than the token budget
        out["max_num_seqs"] = min(int(settings.max_num_seqs), int(budget))
    return out


def server_devices(visible: str | None, device_count: int, j: int, tensor_parallel_size: int, k: int) -> str:
    """Return ``CUDA_VISIBLE_DEVICES`` for engine ``j`` of a server's ``k`` engines of ``tensor_parallel_size`` T
    devices each: entries ``j*T .. j*T+T-1`` of the server's own list (``visible``; when unset, the ``device_count``
    devices 0..n-1). SystemExit naming both flags when the list is too short."""
    listed = [d.strip() for d in visible.split(",") if d.strip()] if visible is not None else None
    devices = listed if listed is not None else [str(d) for d in range(device_count)]
    need = k * tensor_parallel_size
    if len(devices) < need:
        where = f"CUDA_VISIBLE_DEVICES={visible}" if visible is not None else f"this machine's {device_count}"
        raise SystemExit(
            f"vllm-serve: --data_parallel_size {k} x --tensor_parallel_size {tensor_parallel_size} needs {need} "
            f"GPUs; {where} lists {len(devices)}: give the server more devices or lower those flags"
        )
    return ",".join(devices[j * tensor_parallel_size : (j + 1) * tensor_parallel_size])
