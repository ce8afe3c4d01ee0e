"""`mmreason bench update-throughput`: policy-update throughput (tokens/s, MFU) of a random-init model.

Builds a Qwen2.5-VL of a named shape (``3b`` is Qwen2.5-VL-3B's shape; ``tiny`` / ``small`` are the CPU
shapes of ``mmreason tiny-model``) straight from its config, no checkpoint or tokenizer needed, and times
the GRPO policy update the trainer runs: one group of G completions of a prompt with image pages, the
trainer's log-prob path (shared prefix or plain padded forward), the clipped policy loss, backward and an
AdamW step. Made for the first minutes on a lent GPU: one command gives a figure.

MFU counts the FLOPs the update has to do (the prompt and its images once per group, then G completions
attending to it), so the plain path, which repeats the prompt G times, shows a lower MFU for the same work:
6 x parameters x tokens for the dense layers (vision tower on patches, text layers on tokens, LM head on
completion tokens only), plus causal attention in the text layers. Vision attention is left out (small).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForImageTextToText, PretrainedConfig

from mmreason import rl
from mmreason.bench.update_profile import print_profile
from mmreason.models.loading import cpu_attention, resolve_attn_implementation, resolve_dtype
from mmreason.models.tiny import SIZES, TinySize, model_config
from mmreason.rollout import shared_prefix as sp
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.train.precision import MasterWeightAdamW, needs_master_weights
from mmreason.types import Trajectory

T = TypeVar("T")

# Qwen2.5-VL-3B-Instruct's and -7B-Instruct's shapes (their published config.json: text hidden size, layers,
# heads, KV heads, MLP width; vision width, depth, heads, MLP width); the vocabulary and special-token ids are
# Qwen's. The 7B one has 8.29 B parameters (tests/bench/test_grpo_shape.py counts them on the meta device).
QWEN_SHAPES: dict[str, TinySize] = {
    "3b": TinySize(151936, 2048, 36, 16, 2, 11008, 1280, 32, 16, 3420),
    "7b": TinySize(152064, 3584, 28, 28, 4, 18944, 1280, 32, 16, 3420),
}
SHAPES: dict[str, TinySize] = {**SIZES, **QWEN_SHAPES}
_QWEN_IDS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
}
_FULL_ATTENTION_BLOCKS = {"3b": [7, 15, 23, 31], "7b": [7, 15, 23, 31]}
# Dense bf16 peak of common accelerators (TFLOP/s), matched on the CUDA device name; --peak-tflops overrides.
PEAK_TFLOPS = {
    "H200": 989.4,
    "H100": 989.4,
    "H800": 989.4,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "L4": 121.0,
    "A10": 125.0,
    "4090": 165.2,
}
PATCH = 14  # vision patch side; 2 x 2 patches merge into one visual token
PATCH_DIM = 3 * 2 * PATCH * PATCH  # channels x temporal patch x patch x patch


@dataclass(frozen=True)
class Workload:
    pages: int = 8  # images in the prompt
    image_tokens: int = 64  # merged visual tokens per image (a square grid when it is a square number)
    prompt_text: int = 96  # text tokens of the prompt
    completion_len: int = 64
    num_generations: int = 8

    @property
    def prompt_length(self) -> int:
        return self.prompt_text + self.pages * (self.image_tokens + 2)

    @property
    def patches(self) -> int:
        return 4 * self.pages * self.image_tokens


def shape_config(shape: str) -> tuple[PretrainedConfig, dict[str, int]]:
    """The Qwen2.5-VL config of a named shape and its special-token ids (Qwen's for the Qwen shapes), built
    without weights: the meta device counts its parameters, ``build_model`` initialises them."""
    size = SHAPES[shape]
    vocab = size.model_vocab or size.vocab_size
    ids = _QWEN_IDS if shape in QWEN_SHAPES else {name: vocab - 16 + i for i, name in enumerate(_QWEN_IDS)}
    return model_config("qwen2_5_vl", size, ids, vocab, _FULL_ATTENTION_BLOCKS.get(shape)), ids


def build_model(
    shape: str, dtype: torch.dtype, attn: str, device: torch.device, seed: int = 0
) -> tuple[Any, dict[str, int]]:
    """A random-init model of a named shape on ``device`` (on a GPU, allocated there: no CPU copy)."""
    config, ids = shape_config(shape)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForImageTextToText.from_config(config, dtype=dtype, attn_implementation=attn)
    model.train()
    return model, ids


def _grid(tokens: int) -> tuple[int, int]:
    side = math.isqrt(tokens)
    return (2 * side, 2 * side) if side * side == tokens else (2, 2 * tokens)


def synthetic_group(w: Workload, ids: dict[str, int], vocab: int, seed: int = 0) -> list[Trajectory]:
    """G trajectories of one prompt (text, ``pages`` images, text) with random token ids and pixels."""
    g = torch.Generator().manual_seed(seed)
    text_ids = min(ids.values())  # ordinary tokens lie below the special ones

    def words(n: int) -> torch.Tensor:
        return torch.randint(0, text_ids, (n,), generator=g)

    h, wd = _grid(w.image_tokens)
    pieces, types = [words(w.prompt_text // 2)], [torch.zeros(w.prompt_text // 2, dtype=torch.long)]
    for _ in range(w.pages):
        page = torch.tensor(
            [ids["<|vision_start|>"]] + [ids["<|image_pad|>"]] * w.image_tokens + [ids["<|vision_end|>"]]
        )
        pieces.append(page)
        types.append(torch.tensor([0] + [1] * w.image_tokens + [0]))
    rest = w.prompt_text - w.prompt_text // 2
    pieces.append(words(rest))
    types.append(torch.zeros(rest, dtype=torch.long))
    prompt, prompt_types = torch.cat(pieces), torch.cat(types)
    visual = {
        "pixel_values": torch.randn(w.patches, PATCH_DIM, generator=g),
        "image_grid_thw": torch.tensor([[1, h, wd]] * w.pages),
    }
    out = []
    for _ in range(w.num_generations):
        completion = torch.cat([words(w.completion_len - 1), torch.tensor([ids["<|im_end|>"]])])
        out.append(
            Trajectory(
                sample_id="bench",
                group_id=0,
                token_ids=torch.cat([prompt, completion]),
                action_mask=torch.cat([torch.zeros(len(prompt)), torch.ones(len(completion))]),
                prompt_length=len(prompt),
                completion_text="",
                mm_token_type_ids=torch.cat([prompt_types, torch.zeros(len(completion), dtype=torch.long)]),
                visual=[visual],
            )
        )
    return out


def update_flops(model: Any, w: Workload) -> float:
    """FLOPs of one update (forward + backward) on one group, counting the prompt once."""
    cfg = model.config.text_config
    d, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    visual = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    head = vocab * d
    embed = vocab * d
    body = sum(p.numel() for p in model.parameters()) - visual - head - embed
    p, c, g = w.prompt_length, w.completion_len, w.num_generations
    dense = 6 * (visual * w.patches + body * (p + g * c) + head * g * c)
    attention = 6 * layers * d * p * p + g * 12 * layers * d * c * (p + c / 2)
    return float(dense + attention)


def peak_flops(device: torch.device, override: float | None) -> float | None:
    if override:
        return override * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tf * 1e12 for key, tf in PEAK_TFLOPS.items() if key in name), None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def saved_for_backward_bytes(fn: Callable[[], T]) -> tuple[T, int]:
    """``fn()`` and the bytes of the distinct tensors autograd saved for backward while it ran (the activation
    memory of an update, parameters excluded)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if not isinstance(t, torch.nn.Parameter):
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def bench_update(
    shape: str = "tiny",
    workload: Workload = Workload(),
    *,
    steps: int = 5,
    warmup: int = 2,
    dtype: str = "auto",
    attn: str = "auto",
    shared_prefix: bool = True,
    gradient_checkpointing: bool = False,
    peak_tflops: float | None = None,
    chunked_head: bool = True,
    master_weights: bool = True,
) -> dict:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = resolve_dtype(dtype)
    attn_name = cpu_attention(resolve_attn_implementation(attn, torch_dtype), torch_dtype)
    model, ids = build_model(shape, torch_dtype, attn_name, device)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    master = master_weights and needs_master_weights(model.parameters())
    optimizer = (MasterWeightAdamW if master else torch.optim.AdamW)(
        model.parameters(), lr=1e-6, fused=True
    )  # as the trainer's with optim=adamw_torch_fused
    trajectories = synthetic_group(workload, ids, model.config.text_config.vocab_size)
    pad = ids["<|endoftext|>"]
    batch = collate(trajectories, pad).to(device)
    batch.visual["pixel_values"] = batch.visual["pixel_values"].to(torch_dtype)
    for t in trajectories:
        t.visual = [
            {k: v.to(device).to(torch_dtype) if v.is_floating_point() else v.to(device) for k, v in t.visual[0].items()}
        ]
    use_shared = shared_prefix and sp.applies(model, trajectories)
    advantages = torch.linspace(-1, 1, len(trajectories), device=device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    rows, saved = [], 0

    def logprobs() -> torch.Tensor:  # with the entropy, as the trainer's update takes it
        if use_shared:
            return sp.shared_prefix_logprobs(
                model, trajectories, batch.input_ids.shape[1], pad, True, chunked=chunked_head
            )[0]
        return token_logprobs(model, batch, True, chunked=chunked_head)[0]

    for i in range(warmup + steps):
        _sync(device)
        t0 = time.perf_counter()
        logp, saved = saved_for_backward_bytes(logprobs)
        out = rl.policy_loss("clipped", logp, logp.detach(), advantages, batch.action_mask)
        _sync(device)
        t1 = time.perf_counter()
        out.loss.backward()
        _sync(device)
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        t3 = time.perf_counter()
        if i >= warmup:
            rows.append((t1 - t0, t2 - t1, t3 - t2))
    fwd, bwd, opt = (statistics.median(r[k] for r in rows) for k in range(3))
    update = fwd + bwd
    w = workload
    flops = update_flops(model, w)
    peak = peak_flops(device, peak_tflops)
    return {
        "shape": shape,
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "dtype": str(torch_dtype).removeprefix("torch."),
        "attention": attn_name,
        "path": "shared prefix" if use_shared else "plain",
        "gradient_checkpointing": gradient_checkpointing,
        "forward_s": fwd,
        "backward_s": bwd,
        "optimizer_s": opt,
        "sequence_tokens_per_s": w.num_generations * (w.prompt_length + w.completion_len) / update,
        "completion_tokens_per_s": w.num_generations * w.completion_len / update,
        "update_tflops": flops / 1e12,
        "achieved_tflops_per_s": flops / update / 1e12,
        "mfu": flops / update / peak if peak else None,
        "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
        "saved_for_backward_mib": saved / 2**20,
        "chunked_head": chunked_head,
        "master_weights": master,
        "workload": w,
        "steps": steps,
        "model": model,
        "trajectories": trajectories,
        "pad": pad,
        "optimizer": optimizer,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default=None,
        help="model shape (default: 3b on CUDA, tiny on CPU; qwen-vocab: 32 M, Qwen's vocabulary; 3b, 7b: "
        "Qwen2.5-VL-3B's and -7B's)",
    )
    parser.add_argument("--pages", type=int, default=8, help="images in the prompt")
    parser.add_argument(
        "--image-tokens", type=int, default=None, help="visual tokens per image (default: 256 for 3b, 7b; 64 otherwise)"
    )
    parser.add_argument("--prompt-text", type=int, default=96, help="text tokens in the prompt")
    parser.add_argument("--completion-len", type=int, default=None, help="default: 512 for 3b, 7b; 64 otherwise")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--dtype", default="auto", help="a dtype, or several (float32,bfloat16): measured in turns")
    parser.add_argument("--attn", default="auto", help="auto | sdpa | eager | flash_attention_2")
    parser.add_argument("--plain", action="store_true", help="the plain padded forward, not the shared prefix")
    parser.add_argument(
        "--head",
        default="chunked",
        help="chunked | logits | chunked,logits: log-probs from the LM head's hidden states chunk by "
        "chunk (the trainer's), or from whole logits kept for backward",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds over the variants (dtypes x heads), in turns; the figures are medians",
    )
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--no-master-weights", action="store_true", help="AdamW on the bf16 weights themselves")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="time and FLOPs by part against the measured matmul rate (update_profile.py)",
    )
    parser.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default: known GPUs)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")


MEASURES = [
    ("forward (s)", "forward_s", "{:.3f}"),
    ("backward (s)", "backward_s", "{:.3f}"),
    ("optimizer step (s)", "optimizer_s", "{:.3f}"),
    ("sequence tokens / s", "sequence_tokens_per_s", "{:,.0f}"),
    ("completion tokens / s", "completion_tokens_per_s", "{:,.0f}"),
    ("TFLOP per update", "update_tflops", "{:.3f}"),
    ("achieved TFLOP/s", "achieved_tflops_per_s", "{:.3f}"),
    ("MFU", "mfu", "{:.1%}"),
    ("peak memory (GiB)", "peak_memory_gib", "{:.1f}"),
    ("saved for backward (MiB)", "saved_for_backward_mib", "{:,.1f}"),
]


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    shape = args.shape or ("3b" if torch.cuda.is_available() else "tiny")
    big = shape in QWEN_SHAPES
    w = Workload(
        pages=args.pages,
        image_tokens=args.image_tokens or (256 if big else 64),
        prompt_text=args.prompt_text,
        completion_len=args.completion_len or (512 if big else 64),
        num_generations=args.num_generations,
    )
    variants = [(d, h) for d in args.dtype.split(",") for h in args.head.split(",")]
    runs: dict[tuple[str, str], list[dict]] = {v: [] for v in variants}
    for _ in range(max(1, args.repeats)):
        for dtype, head in variants:
            runs[(dtype, head)].append(
                bench_update(
                    shape,
                    w,
                    steps=args.steps,
                    warmup=args.warmup,
                    dtype=dtype,
                    attn=args.attn,
                    shared_prefix=not args.plain,
                    gradient_checkpointing=args.gradient_checkpointing,
                    peak_tflops=args.peak_tflops,
                    chunked_head=head == "chunked",
                    master_weights=not args.no_master_weights,
                )
            )
    r = runs[variants[0]][-1]
    console = Console(width=140)
    console.print(
        f"policy update, Qwen2.5-VL {shape} shape ({r['parameters'] / 1e6:,.1f} M parameters): "
        f"{r['device_name']}, attention {r['attention']}, {r['path']}"
        f"{', gradient checkpointing' if r['gradient_checkpointing'] else ''}; one group of "
        f"{w.num_generations} x {w.completion_len} completion tokens on a {w.prompt_length}-token "
        f"prompt ({w.pages} images x {w.image_tokens} tokens); median of {r['steps']} steps"
        f"{f' in each of {args.repeats} rounds over the variants, in turns' if args.repeats > 1 else ''}; "
        f"{torch.get_num_threads()} thread(s)"
    )
    table = Table()
    table.add_column("measure")
    for dtype, head in variants:
        table.add_column(f"{runs[(dtype, head)][0]['dtype']}, {head} head", justify="right")
    for label, key, fmt in MEASURES:
        cells = []
        for v in variants:
            values = [x[key] for x in runs[v] if x[key] is not None]
            cells.append(fmt.format(statistics.median(values)) if values else "n/a")
        table.add_row(label, *cells)
    console.print(table)
    if len(variants) > 1:
        base = statistics.median(x["forward_s"] + x["backward_s"] for x in runs[variants[0]])
        for v in variants[1:]:
            other = statistics.median(x["forward_s"] + x["backward_s"] for x in runs[v])
            console.print(
                f"update (forward + backward) {v[0]}, {v[1]} head / {variants[0][0]}, {variants[0][1]} head: "
                f"{other / base:.2f}x"
            )
    if args.profile:
        for v in variants:
            print_profile(console, runs[v][-1], w)
    return 0
