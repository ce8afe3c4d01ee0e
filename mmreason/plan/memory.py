"""Per-GPU memory of a GRPO run from the model's sizes and the run's settings: pure arithmetic, no torch.

Every item is a count of bytes with the phases in which it is alive: ``update`` (forward and backward of one
mini-batch), ``step`` (the optimizer step) and ``rollout`` (generation). The run's peak is the largest phase's
sum; a fixed allowance for the CUDA context, NCCL buffers and allocator fragmentation is added on a GPU.

- **Weights, gradients, optimizer state** (mixed-precision training as Micikevicius et al. 2018 and ZeRO,
  Rajbhandari et al. 2020, count them: 2 + 2 + 12 bytes a parameter for bf16 weights with fp32 masters and
  moments). On one process or under DDP the model keeps its own dtype; a bf16 model with
  ``model.master_weights`` adds fp32 masters and their fp32 gradient buffers (``train/precision.py``), and DDP
  adds its gradient buckets (a second copy of the gradients). Under FSDP2 every process keeps 1/N of the
  parameters, gradients and moments; for a run that computes in bf16 the shards are fp32 masters, units are
  gathered in bf16 (the root, which holds the embeddings and the head, and two decoder layers at a time), and
  gradients are reduced in fp32 (docs/training.md, "One code path on CPUs and GPUs").
- **Activations** follow the method of Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models" (section 4.1: count, per layer and token, the bytes of every tensor autograd saves for
  backward; their GPT layer comes to ``sbh(34 + 5as/h)``). Counted for the Qwen decoder layer as transformers
  writes it, with flash-style attention (no ``s x s`` scores are kept), per token and layer:
  ``2(4 + r)h`` for the two RMSNorms (each saves its fp32 input and its normalised output in the residual
  dtype r), ``e(3q + 2k)`` for attention (query, key and value as the attention kernel saves them, its output
  and the output projection's contiguous input; k is the KV width, the query width when SDPA repeats the KV
  heads for a masked batch), and ``4eI`` for the gated MLP (gate, up, SiLU output, their product), e the
  compute dtype's bytes. Under autocast over fp32 weights every linear keeps its own bf16 copy of its input
  (``5eh`` more). The vision tower counts its blocks the same way on 4 patches per visual token. With gradient
  checkpointing (transformers' per-layer checkpoint) each layer keeps only its input (``rh``) and one layer is
  recomputed at a time. Backward adds a working set: the residual stream's gradient and one MLP's gradients.
- **The LM head** sees only the completion tokens. Chunked (``rl/lm_head.py``) it keeps a few fp32
  ``[c x V]`` chunks of ``HIDDEN_CHUNK_ELEMENTS`` and one ``[V x h]`` weight gradient (under FSDP2 inside the
  head's forward, ``rollout/sharded_head.py``); as whole logits (a head the trainer cannot chunk: LoRA-wrapped,
  or ``chunked_sharded_head=False`` for the trainer before it chunked a sharded head) it keeps the logits,
  their suppressed-id copy, the fp32 log-softmax input and, with the entropy kept differentiable as today, the
  entropy's fp32 graph (``rl/logits.py``).
- **Reference model** (``algorithm.beta > 0``): in the model's dtype, sharded like the policy under FSDP2 (1/N
  on each GPU), a full copy on one process or under DDP (``train/setup.py`` ``place_reference``).
- **Rollout**: HF generation keeps every row's KV cache; under FSDP2 the whole policy is gathered in the compute
  dtype for HF generation (``parallel/sharding.py`` ``gathered``), not when a vLLM engine generates. A colocated vLLM engine holds
  ``rollout.vllm_gpu_memory_utilization`` of the card (its weights and KV cache), during the update too unless
  ``rollout.vllm_enable_sleep_mode``.

``TrainerMemory`` records what the trainer does where several choices exist (``TODAY`` is this version's);
``EASYR1`` is the placement EasyR1's published hardware table assumes (parameters and optimizer offloaded during
generation, the reference model sharded and offloaded, no whole-policy gather), used to check the arithmetic
against that table (tests/plan).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from mmreason.plan.shapes import ModelShape

GIB = 1 << 30
HIDDEN_CHUNK_ELEMENTS = 1 << 24  # rl/lm_head.py's (tests/plan checks they agree)
HEAD_CHUNK_FREE_SHARE = 1 / 8  # rl/lm_head.py's: on CUDA a chunk takes this share of the free memory
HEAD_CHUNK_MAX_BYTES = 4 << 30  # and at most this
GPU_RESERVE_GIB = 1.5  # CUDA context, NCCL buffers, allocator fragmentation: an allowance, not a measurement
LORA_TARGETS = 7  # q, k, v, o, gate, up, down (model.lora_target_modules' default)
# update: forward done, the LM head's backward (saved activations + the head's working set); backward: through
# the layers (saved activations + one layer's gradients, and under checkpointing its recomputed activations)
Phase = Literal["update", "backward", "step", "rollout"]
PHASES: tuple[Phase, ...] = ("update", "backward", "step", "rollout")
TRAIN: tuple[Phase, ...] = ("update", "backward")
ALL: tuple[Phase, ...] = PHASES
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class TrainerMemory:
    """Where the trainer keeps what (``TODAY``: this version's choices)."""

    reference: Literal["replicated", "sharded", "offloaded"] = "sharded"
    rollout_gather: bool = False  # FSDP2: the whole policy gathered for the rollout phase even when vLLM generates
    offload_in_rollout: bool = False  # parameters, gradients and optimizer state on the CPU while generating
    chunked_sharded_head: bool = True  # the chunked LM head on a sharded head (rollout/sharded_head.py)
    sharded_masters: bool = True  # FSDP2 shards fp32 masters for a bf16 run, whatever model.master_weights says
    entropy_graph: bool = False  # whole-logits entropy kept differentiable (only with an entropy band now)


TODAY = TrainerMemory()
EASYR1 = TrainerMemory(reference="offloaded", rollout_gather=False, offload_in_rollout=True, sharded_masters=False)


@dataclass(frozen=True)
class RunSettings:
    """The settings of a run that set its memory (``mmreason plan`` reads them from the recipe and its flags)."""

    gpus: int = 1
    sharding: Literal["single", "ddp", "fsdp"] = "single"
    device: Literal["cuda", "cpu"] = "cuda"
    dtype: str = "bfloat16"  # model.dtype, resolved
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    master_weights: bool = True
    gradient_checkpointing: bool = False
    lora: bool = False
    lora_r: int = 16
    freeze_vision_tower: bool = False
    beta: float = 0.0
    mini_batch_size: int = 16
    num_generations: int = 8
    prompts_per_step: int = 4
    prompt_tokens: int = 4096
    completion_tokens: int = 256
    visual_tokens: int = 0  # of the prompt
    shared_prefix: bool = True
    attention: Literal["flash", "sdpa"] = "flash"
    rollout_backend: Literal["hf", "vllm"] = "hf"
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_gpu_memory_utilization: float = 0.3
    vllm_sleep: bool = False
    fused_optimizer: bool = False
    trainer: TrainerMemory = field(default_factory=TrainerMemory)


@dataclass(frozen=True)
class Item:
    name: str
    bytes: float
    phases: tuple[Phase, ...]
    note: str


@dataclass(frozen=True)
class Plan:
    """The items, each phase's total, the peak and whether it fits ``gpu_memory_gib``."""

    items: list[Item]
    totals: dict[str, float]
    peak_phase: str
    peak: float
    gpu_memory_gib: float

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu_memory_gib * GIB


def _dtypes(s: RunSettings) -> tuple[int, int, int]:
    """(bytes of a stored weight, of the compute dtype, of the residual stream)."""
    b = BYTES.get(s.dtype, 4)
    low_mp = s.mixed_precision != "no"
    e = 2 if (b == 2 or low_mp) else 4
    # FSDP2's mixed-precision policy casts the gathered units and their inputs: the residual stream is bf16 too;
    # autocast over fp32 weights (one process, DDP) keeps it fp32
    r = e if (b == 2 or s.sharding == "fsdp") else 4
    return b, e, r


def _trainable(shape: ModelShape, s: RunSettings) -> int:
    if s.lora:
        h, q, kv, i = shape.hidden, shape.q_width, shape.kv_width, shape.intermediate
        return s.lora_r * shape.layers * ((h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h))
    return shape.text_parameters() + (0 if s.freeze_vision_tower else shape.vision_parameters())


def model_state(shape: ModelShape, s: RunSettings) -> list[Item]:
    """Weights, gradients and AdamW state per GPU (see the module docstring)."""
    b, e, _ = _dtypes(s)
    total, train = shape.parameters(), _trainable(shape, s)
    t = s.trainer
    state: tuple[Phase, ...] = (*TRAIN, "step") if t.offload_in_rollout else ALL
    low = b == 2 or s.mixed_precision != "no"
    if s.sharding == "fsdp":
        n = s.gpus
        store = 4 if low and (t.sharded_masters or s.master_weights) else b
        moments = 4 if store == 4 else b
        grad = 4 if store == 4 else b
        frozen = (total - train) * store
        largest = max(shape.layer_parameters(), shape.vision_block_parameters())
        root = shape.root_parameters()
        return [
            Item("weights (sharded)", ((train * store) + frozen) / n, state, f"1/{n} of {total:,} in {store} B"),
            Item("gathered units", (root + 2 * largest) * e, TRAIN, "root (embeddings, head) + 2 layers"),
            Item("gradients (sharded)", train * grad / n, (*TRAIN, "step"), f"{grad} B / trainable parameter"),
            Item("AdamW moments (sharded)", 2 * train * moments / n, state, f"2 x {moments} B / trainable"),
        ]
    items = [
        Item("weights", total * b, state, f"{total:,} parameters in {b} B"),
        Item("gradients", train * b, (*TRAIN, "step"), f"{train:,} trainable in {b} B"),
    ]
    master = b == 2 and s.master_weights
    moments = 4 if (master or b == 4) else b
    if s.sharding == "ddp":
        items.append(Item("DDP gradient buckets", train * b, state, "a second copy of the gradients"))
    if master:
        items.append(Item("fp32 masters + their gradients", train * 8, state, "train/precision.py"))
    items.append(Item("AdamW moments", 2 * train * moments, state, f"2 x {moments} B / trainable"))
    return items


def _tokens(s: RunSettings) -> tuple[int, int, int, int]:
    """(rows of a mini-batch, groups in it, tokens through the layers, completion tokens)."""
    rows = max(1, min(s.mini_batch_size, s.prompts_per_step * s.num_generations))
    groups = math.ceil(rows / s.num_generations)
    shared = s.shared_prefix and s.sharding != "fsdp"  # FSDP-sharded models take the plain path today
    layer_tokens = (
        groups * s.prompt_tokens + rows * s.completion_tokens
        if shared
        else rows * (s.prompt_tokens + s.completion_tokens)
    )
    return rows, groups, layer_tokens, rows * s.completion_tokens


def layer_bytes_per_token(shape: ModelShape, s: RunSettings) -> int:
    """Bytes one decoder layer saves for backward per token (the module docstring's count)."""
    b, e, r = _dtypes(s)
    h = shape.hidden
    kv = shape.kv_width if s.attention == "flash" else shape.q_width
    norms = 2 * (4 + r) * h
    casts = 5 * e * h if r != e else 0
    return norms + casts + e * (3 * shape.q_width + 2 * kv) + 4 * e * shape.intermediate


def _vision_bytes_per_patch(shape: ModelShape, s: RunSettings) -> int:
    _, e, r = _dtypes(s)
    v, i = shape.vision_hidden, shape.vision_intermediate
    mlp = 4 * e * i if shape.family == "qwen2_5_vl" else 2 * e * i
    return 2 * (4 + r) * v + 5 * e * v + mlp


def activations(shape: ModelShape, s: RunSettings) -> list[Item]:
    """What one mini-batch's forward saves for backward, and backward's working set."""
    _, e, r = _dtypes(s)
    rows, groups, tokens, completion = _tokens(s)
    per_layer = layer_bytes_per_token(shape, s)
    shared = s.shared_prefix and s.sharding != "fsdp"
    kv = shape.kv_width if s.attention == "flash" else shape.q_width
    prefix_kv = shape.layers * rows * s.prompt_tokens * 2 * kv * e if shared else 0  # the cache repeated to G rows
    vision_rows = groups if shared else rows
    patches = 4 * s.visual_tokens * vision_rows * (0 if s.freeze_vision_tower or s.lora else 1)
    final = (4 + r) * shape.hidden * completion + e * shape.hidden * completion  # final norm, the head's input
    work = tokens * (2 * r * shape.hidden + 2 * e * shape.intermediate)
    if s.gradient_checkpointing:
        text = shape.layers * tokens * r * shape.hidden
        vision = patches * shape.vision_depth * r * shape.vision_hidden
        prefix_kv = shape.layers * groups * s.prompt_tokens * 2 * shape.kv_width * e if shared else 0
        how = f"checkpointed: each layer's input ({r * shape.hidden:,} B / token)"
        work += tokens * per_layer + patches * _vision_bytes_per_patch(shape, s)
        work_note = "one layer recomputed, its gradients"
    else:
        text = shape.layers * tokens * per_layer
        vision = patches * shape.vision_depth * _vision_bytes_per_patch(shape, s)
        how = f"{per_layer:,} B / token / layer x {shape.layers} layers"
        work_note = "residual-stream and MLP gradients of one layer"
    return [
        Item("activations (text layers)", text + prefix_kv + final, TRAIN, f"{tokens:,} tokens; {how}"),
        Item("activations (vision tower)", vision, TRAIN, f"{patches:,} patches"),
        Item("backward working set", work, ("backward",), work_note),
    ]


def head_chunk_rows(vocab: int, device: str, gpu_memory_gib: float) -> int:
    """Rows per chunk of the LM head as ``rl.lm_head.chunk_rows_for`` picks them: on CUDA from the free memory,
    counted here as the whole card (an upper bound: the chunk shrinks with what is free); elsewhere fixed."""
    if device != "cuda":
        return max(1, HIDDEN_CHUNK_ELEMENTS // vocab)
    share = int(gpu_memory_gib * GIB * HEAD_CHUNK_FREE_SHARE)
    budget = min(HEAD_CHUNK_MAX_BYTES, max(4 * HIDDEN_CHUNK_ELEMENTS, share))
    return max(1, budget // (3 * 4 * vocab))


def lm_head(shape: ModelShape, s: RunSettings, gpu_memory_gib: float = 80.0) -> Item:
    """The LM head's working set over the mini-batch's completion tokens M."""
    b, e, _ = _dtypes(s)
    _, _, _, m = _tokens(s)
    v = shape.vocab
    chunked = s.sharding != "fsdp" or s.trainer.chunked_sharded_head
    if chunked:
        c = min(m, head_chunk_rows(v, s.device, gpu_memory_gib)) * v
        cast = e * c if e < 4 else 0
        weight_grad = v * shape.hidden * (4 + (e if e < 4 else 0))  # the fp32 [V x h] sum, a bf16 chunk's product
        weight_cast = v * shape.hidden * e if b != e else 0
        size = 8 * c + cast + weight_grad + weight_cast
        return Item("LM head (chunked)", size, ("update",), f"{m:,} tokens, chunks of {c // v:,} rows")
    graph = 16 if s.trainer.entropy_graph else 4
    size = (2 * e + graph + 4) * m * v
    note = f"[{m:,} x {v:,}] logits, fp32 copies" + (", entropy graph" if s.trainer.entropy_graph else "")
    return Item("LM head (whole logits)", size, ("update",), note)


def reference(shape: ModelShape, s: RunSettings) -> list[Item]:
    if s.beta <= 0:
        return []
    b, e, _ = _dtypes(s)
    kind = s.trainer.reference
    if kind == "replicated":
        return [Item("reference model", shape.parameters() * b, ALL, "a full copy on every GPU (train/setup.py)")]
    if kind == "sharded":
        n = s.gpus if s.sharding == "fsdp" else 1
        return [Item("reference model (sharded)", shape.parameters() * b / n, ALL, f"1/{n} on each GPU")]
    unit = shape.layer_parameters() * 2 + shape.embedding_parameters() + shape.head_parameters()
    return [Item("reference model (offloaded)", unit * e, TRAIN, "units gathered from the CPU")]


def rollout(shape: ModelShape, s: RunSettings, gpu_memory_gib: float) -> list[Item]:
    """Generation's memory: the engine's share of the card (vLLM colocated) or HF generation's KV cache; the
    whole policy gathered under FSDP2."""
    _, e, _ = _dtypes(s)
    items = []
    if (
        s.sharding == "fsdp"
        and (s.rollout_backend != "vllm" or s.trainer.rollout_gather)
        and not (s.rollout_backend == "vllm" and s.vllm_mode == "server")
    ):
        items.append(Item("policy gathered for rollouts", shape.parameters() * e, ("rollout",), "parallel/sharding.py"))
    if s.rollout_backend == "vllm":
        if s.vllm_mode == "colocate":
            phases: tuple[Phase, ...] = ("rollout",) if s.vllm_sleep else ALL
            util = s.vllm_gpu_memory_utilization
            items.append(Item("vLLM engine", util * gpu_memory_gib * GIB, phases, f"{util:g} of the card"))
        return items
    rows = s.prompts_per_step * s.num_generations
    seq = s.prompt_tokens + s.completion_tokens
    cache = rows * seq * shape.layers * 2 * shape.kv_width * e
    logits = rows * shape.vocab * 4 * 3
    prefill = s.prompts_per_step * s.prompt_tokens * (4 * shape.hidden + 2 * shape.intermediate) * e
    items.append(Item("HF generation", cache + logits + prefill, ("rollout",), f"KV cache of {rows} x {seq} tokens"))
    return items


def optimizer_step(shape: ModelShape, s: RunSettings) -> Item:
    """AdamW's temporaries at the step: none fused; the foreach loop (GPU) one state-sized buffer; the
    per-tensor loop (CPU) one buffer of the largest tensor."""
    b, _, _ = _dtypes(s)
    train = _trainable(shape, s)
    n = s.gpus if s.sharding == "fsdp" else 1
    width = 4 if (b == 4 or s.master_weights or s.sharding == "fsdp") else b
    if s.fused_optimizer:
        size = 0.0
    elif s.device == "cuda":
        size = train * width / n
    else:
        size = max(shape.embedding_parameters(), shape.head_parameters()) * width
    return Item("optimizer step buffers", size, ("step",), "AdamW's sqrt(v) buffer")


def plan(shape: ModelShape, s: RunSettings, gpu_memory_gib: float) -> Plan:
    """Every item and the peak phase of ``s`` on a card of ``gpu_memory_gib`` GiB."""
    items = [
        *model_state(shape, s),
        *activations(shape, s),
        lm_head(shape, s, gpu_memory_gib),
        optimizer_step(shape, s),
        *reference(shape, s),
        *rollout(shape, s, gpu_memory_gib),
    ]
    if s.device == "cuda":
        items.append(Item("CUDA context, NCCL, fragmentation", GPU_RESERVE_GIB * GIB, ALL, "an allowance"))
    totals: dict[str, float] = {p: sum(i.bytes for i in items if p in i.phases) for p in PHASES}
    peak_phase = max(totals, key=lambda p: totals[p])
    return Plan(items, totals, peak_phase, totals[peak_phase], gpu_memory_gib)


# Settings mmreason has that lower a run's memory, in the order they are tried (each keeps the ones before).
Change = tuple[str, dict]


def candidate_changes(shape: ModelShape, s: RunSettings, gpu_memory_gib: float) -> list[Change]:
    out: list[Change] = []
    if not s.gradient_checkpointing:
        out.append(("model.gradient_checkpointing=true", {"gradient_checkpointing": True}))
    if s.sharding != "fsdp" and s.gpus > 1:
        out.append((f"FSDP2 over {s.gpus} GPUs (--fsdp)", {"sharding": "fsdp"}))
    if s.rollout_backend == "vllm" and s.vllm_mode == "colocate" and not s.vllm_sleep:
        out.append(("rollout.vllm_enable_sleep_mode=true", {"vllm_sleep": True}))
    if s.beta > 0:
        out.append(("algorithm.beta=0", {"beta": 0.0}))
    if s.rollout_backend == "vllm" and s.vllm_mode == "colocate":
        # the engine's weights and 2 GiB of KV cache: the least a smaller share can be
        least = math.ceil((shape.parameters() * _dtypes(s)[1] / GIB + 2) / gpu_memory_gib * 20) / 20
        if least < s.vllm_gpu_memory_utilization:
            out.append((f"rollout.vllm_gpu_memory_utilization={least:g}", {"vllm_gpu_memory_utilization": least}))
    size = s.mini_batch_size
    while size > 1:
        size = max(1, size // 2)
        out.append((f"mini_batch_size={size}", {"mini_batch_size": size}))
    if s.sharding != "fsdp" and s.dtype != "float32" and s.master_weights:
        out.append(("model.master_weights=false", {"master_weights": False}))
    if not s.fused_optimizer and s.device == "cuda" and s.sharding != "fsdp":
        out.append(("optim=adamw_torch_fused", {"fused_optimizer": True}))
    if not s.lora:
        out.append(("model.lora=true", {"lora": True}))
    return out


def what_fits(shape: ModelShape, s: RunSettings, gpu_memory_gib: float) -> tuple[list[str], Plan]:
    """The changes (from ``candidate_changes``, cumulative, each kept only if it lowers the peak) after which
    ``s`` fits, and the plan they give; all of them and the lowest plan when nothing fits."""
    chosen: list[str] = []
    current = plan(shape, s, gpu_memory_gib)
    # a single change first: the least disruptive that fits alone
    for name, change in candidate_changes(shape, s, gpu_memory_gib):
        p = plan(shape, replace(s, **change), gpu_memory_gib)
        if p.fits:
            return [name], p
    settings = s
    for name, change in candidate_changes(shape, s, gpu_memory_gib):
        trial = replace(settings, **change)
        p = plan(shape, trial, gpu_memory_gib)
        if p.peak < current.peak:
            settings, current = trial, p
            chosen = [c for c in chosen if not (c.startswith("mini_batch_size") and name.startswith("mini"))]
            chosen.append(name)
            if p.fits:
                break
    return chosen, current
