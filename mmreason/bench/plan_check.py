"""`mmreason bench plan-check`: ``mmreason plan``'s prediction against the peak memory of a real GRPO update.

For each size of ``mmreason tiny-model`` asked for (``tiny``, ``base`` between, the 32 M ``qwen-vocab``) it writes
the checkpoint, loads it with the trainer's loader, and runs one GRPO update of one group of G trajectories
(a prompt with image pages, the trainer's log-prob path with the entropy, the clipped loss, backward, an AdamW
step), after one warm-up update so that AdamW's moments exist as in every later step. It measures the peak of
the bytes held by tensors during forward + backward and during the optimizer step, and compares each with the
planner's CPU prediction for the same settings (``plan/memory.py``, read from the checkpoint's config.json).

What is measured: the CPU allocator's allocation and free events, recorded by torch's profiler
(``profile_memory``), summed in time order; the peak of that sum plus the bytes already held (parameters,
AdamW state) is the peak tensor memory, the quantity the planner predicts and ``torch.cuda.max_memory_allocated``
reports on a GPU. Peak RSS is not used: it counts the allocator's cached and fragmented pages, the Python heap
and libraries loaded on first use, and a process's peak RSS is set once (by the warm-up update here) for good.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mmreason import rl
from mmreason.bench.update_throughput import Workload, synthetic_group
from mmreason.models.loading import ModelConfig, load_model
from mmreason.models.tiny import build_tiny_model, token_id
from mmreason.plan.memory import RunSettings, plan
from mmreason.plan.shapes import load_shape
from mmreason.rollout import shared_prefix as sp
from mmreason.rollout.forward import collate, token_logprobs

SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)


@dataclass(frozen=True)
class Check:
    size: str
    parameters: int
    update_measured: float
    update_predicted: float
    step_measured: float
    step_predicted: float

    @staticmethod
    def ratio(measured: float, predicted: float) -> float:
        return predicted / measured if measured else float("nan")


def tensor_peak(fn: Callable[[], Any]) -> int:
    """Peak bytes that tensors allocated while ``fn()`` ran held at once (allocation and free events of the
    CPU allocator, in time order), above what was held before."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    held = peak = 0
    for e in events:
        held += e.nbytes()
        peak = max(peak, held)
    return peak


def _held(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes held by the parameters, their gradients and the optimizer's state tensors."""
    seen: dict[int, int] = {}
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def settings_for(w: Workload, *, gradient_checkpointing: bool) -> RunSettings:
    """The planner's settings of this bench's update: one process on a CPU, fp32, one group per mini-batch."""
    return RunSettings(
        gpus=1,
        sharding="single",
        device="cpu",
        dtype="float32",
        gradient_checkpointing=gradient_checkpointing,
        mini_batch_size=w.num_generations,
        num_generations=w.num_generations,
        prompts_per_step=1,
        prompt_tokens=w.prompt_length,
        completion_tokens=w.completion_len,
        visual_tokens=w.pages * w.image_tokens,
        shared_prefix=True,
        attention="sdpa",
    )


def check_size(size: str, w: Workload, folder: Path, *, gradient_checkpointing: bool = False) -> Check:
    """One size: write the checkpoint, plan it, run the warm-up and the measured update."""
    path = build_tiny_model(folder / size, size=size)
    shape, _ = load_shape(str(path))
    p = plan(shape, settings_for(w, gradient_checkpointing=gradient_checkpointing), 1e6)
    model = load_model(
        ModelConfig(name_or_path=str(path), dtype="float32", gradient_checkpointing=gradient_checkpointing)
    )
    model.train()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    ids = {name: token_id(tok, name) for name in SPECIALS}
    trajectories = synthetic_group(w, ids, len(tok))
    pad = ids["<|endoftext|>"]
    batch = collate(trajectories, pad)
    advantages = torch.linspace(-1, 1, len(trajectories))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)  # the trainer's optim=adamw_torch

    def forward_backward() -> None:
        if sp.applies(model, trajectories):
            logp = sp.shared_prefix_logprobs(model, trajectories, batch.input_ids.shape[1], pad, True)[0]
        else:
            logp = token_logprobs(model, batch, True)[0]
        rl.policy_loss("clipped", logp, logp.detach(), advantages, batch.action_mask).loss.backward()

    forward_backward()  # warm-up: AdamW's moments exist from here on, as in every later step
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    held = _held(model, optimizer)
    update = held + tensor_peak(forward_backward)
    held_grads = _held(model, optimizer)
    step = held_grads + tensor_peak(optimizer.step)
    return Check(
        size=size,
        parameters=shape.parameters(),
        update_measured=update,
        update_predicted=max(p.totals["update"], p.totals["backward"]),
        step_measured=step,
        step_predicted=p.totals["step"],
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="tiny,base,qwen-vocab", help="mmreason tiny-model sizes, comma-separated")
    parser.add_argument("--pages", type=int, default=2, help="images in the prompt")
    parser.add_argument("--image-tokens", type=int, default=64, help="visual tokens per image")
    parser.add_argument("--prompt-text", type=int, default=96)
    parser.add_argument("--completion-len", type=int, default=128)
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    parser.add_argument("--threads", type=int, default=1)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    torch.set_num_threads(args.threads)
    w = Workload(args.pages, args.image_tokens, args.prompt_text, args.completion_len, args.num_generations)
    with tempfile.TemporaryDirectory() as folder:
        checks = [
            check_size(size, w, Path(folder), gradient_checkpointing=args.gradient_checkpointing)
            for size in args.sizes.split(",")
        ]
    mib = 1 << 20
    table = Table(
        title=f"peak tensor memory, one GRPO update: {w.num_generations} x ({w.prompt_length} prompt + "
        f"{w.completion_len} completion tokens), {w.pages} x {w.image_tokens} visual, fp32"
        f"{', gradient checkpointing' if args.gradient_checkpointing else ''}"
    )
    for column in (
        "size",
        "parameters",
        "update MiB",
        "planned",
        "planned / measured",
        "step MiB",
        "planned",
        "planned / measured",
    ):
        table.add_column(column, justify="right")
    for c in checks:
        table.add_row(
            c.size,
            f"{c.parameters:,}",
            f"{c.update_measured / mib:,.1f}",
            f"{c.update_predicted / mib:,.1f}",
            f"{Check.ratio(c.update_measured, c.update_predicted):.2f}",
            f"{c.step_measured / mib:,.1f}",
            f"{c.step_predicted / mib:,.1f}",
            f"{Check.ratio(c.step_measured, c.step_predicted):.2f}",
        )
    Console(width=160).print(table)
    return 0
