"""`mmreason bench packing`: the update pass padded, packed (padding-free), packed with a token budget, shared prefix.

A random-init Qwen2.5-VL whose cost is the transformer's (hidden 512, 8 layers, a 2,048-token vocabulary: the
LM head is small beside the layers) runs the policy update's forward and backward (log-probs with entropies,
the clipped loss) over one optimizer step's rows, cut into mini-batches as the trainer cuts them (whole groups,
longest first: ``train.minibatches``). The completions are long-tailed, as RL rollouts are: most short, a few at
the length limit, so a padded mini-batch is mostly padding. Reported per path: the update's time (median of
``--steps``, the paths timed in turns; on a CPU the process's CPU time, which a shared machine's load does not
inflate: run it with ``--threads 1``), the tokens the decoder runs and the padding share of them, and the peak bytes tensors held during
one update (the CPU allocator's events, ``plan_check.tensor_peak``; on a GPU ``max_memory_allocated``).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from dataclasses import dataclass

import torch
from rich.console import Console
from rich.table import Table
from transformers import AutoModelForImageTextToText

from mmreason import rl
from mmreason.bench.plan_check import tensor_peak
from mmreason.bench.update_throughput import _QWEN_IDS, PATCH_DIM, _grid
from mmreason.models.tiny import TinySize, model_config
from mmreason.rollout import packing
from mmreason.rollout import shared_prefix as sp
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.train.minibatches import length_sorted_minibatches
from mmreason.train.token_budget import budget_minibatches, token_cost
from mmreason.types import Trajectory

# transformer-dominated: hidden 512, 8 layers (8 heads of 64, 2 KV heads), MLP 2,048; a 2,048-token vocabulary
SHAPE = TinySize(2048, 512, 8, 8, 2, 2048, 128, 2, 2, 256)
PATHS = ("padded", "packed", "packed + token budget", "shared prefix")


@dataclass(frozen=True)
class Mix:
    prompts: int = 4
    num_generations: int = 4
    prompt_text: int = 32
    image_tokens: int = 64  # one image per prompt
    max_completion: int = 512
    at_limit: int = 2  # completions of the step that run to the limit; the rest are short (median ~48)
    mini_batch_size: int = 8
    max_tokens: int | None = None  # the token budget's micro-batch size; None: the real tokens / row-count cuts


def completion_lengths(mix: Mix, seed: int = 0) -> list[int]:
    """Long-tailed lengths: ``at_limit`` at the limit, the rest log-normal around 48 tokens (8 .. limit / 4)."""
    g = torch.Generator().manual_seed(seed)
    n = mix.prompts * mix.num_generations
    short = torch.exp(torch.randn(n, generator=g) * 0.6 + 3.9).round().clamp(8, mix.max_completion // 4)
    lengths = [int(x) for x in short]
    for i in torch.randperm(n, generator=g)[: mix.at_limit].tolist():
        lengths[i] = mix.max_completion
    return lengths


def rollouts(mix: Mix, ids: dict[str, int], seed: int = 0) -> list[Trajectory]:
    """``prompts`` groups of ``num_generations`` trajectories: text, one image, text; random token ids."""
    g = torch.Generator().manual_seed(seed)
    text_ids = min(ids.values())
    lengths = iter(completion_lengths(mix, seed))
    h, w = _grid(mix.image_tokens)
    out = []
    for gid in range(mix.prompts):
        image = [ids["<|vision_start|>"]] + [ids["<|image_pad|>"]] * mix.image_tokens + [ids["<|vision_end|>"]]
        prompt = torch.cat([torch.tensor(image), torch.randint(0, text_ids, (mix.prompt_text,), generator=g)])
        types = torch.tensor([0] + [1] * mix.image_tokens + [0] * (1 + mix.prompt_text))
        visual = {
            "pixel_values": torch.randn(4 * mix.image_tokens, PATCH_DIM, generator=g),
            "image_grid_thw": torch.tensor([[1, h, w]]),
        }
        for _ in range(mix.num_generations):
            n = next(lengths)
            completion = torch.randint(0, text_ids, (n,), generator=g)
            out.append(
                Trajectory(
                    sample_id=f"p{gid}",
                    group_id=gid,
                    token_ids=torch.cat([prompt, completion]),
                    action_mask=torch.cat([torch.zeros(len(prompt)), torch.ones(n)]),
                    prompt_length=len(prompt),
                    completion_text="",
                    mm_token_type_ids=torch.cat([types, torch.zeros(n, dtype=torch.long)]),
                    visual=[visual],
                )
            )
    return out


def decoder_tokens(path: str, minibatches: list[list[Trajectory]]) -> int:
    """Tokens the decoder layers run over one update on ``path`` (padding included)."""
    total = 0
    for rows in minibatches:
        lengths = [t.token_ids.numel() for t in rows]
        if path == "padded":
            total += len(rows) * max(lengths)
        elif path.startswith("packed"):
            total += sum(lengths)
        else:  # the prompt once per group, the completions padded to the group's longest
            groups: dict[int, list[Trajectory]] = {}
            for t in rows:
                groups.setdefault(t.group_id, []).append(t)
            total += sum(g[0].prompt_length + len(g) * max(t.completion_length for t in g) for g in groups.values())
    return total


def bench(mix: Mix, *, steps: int = 3, warmup: int = 1, dtype: torch.dtype = torch.float32) -> dict[str, dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    vocab = SHAPE.vocab_size
    ids = {name: vocab - 16 + i for i, name in enumerate(_QWEN_IDS)}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForImageTextToText.from_config(
                model_config("qwen2_5_vl", SHAPE, ids, vocab), dtype=dtype, attn_implementation="sdpa"
            )
    model.train()
    assert packing.applies(model)
    trajs = rollouts(mix, ids)
    pad = ids["<|endoftext|>"]
    everyone = list(range(len(trajs)))
    cut = length_sorted_minibatches(everyone, trajs, mix.mini_batch_size)
    real = sum(t.token_ids.numel() for t in trajs)
    budget = mix.max_tokens or -(-real // len(cut))  # as many micro-batches as rows give, of equal tokens
    cuts = {path: cut for path in PATHS}
    cuts["packed + token budget"] = budget_minibatches(everyone, trajs, budget, token_cost(trajs))
    minibatches = {path: [[trajs[i] for i in rows] for rows in c] for path, c in cuts.items()}
    batches = {path: [collate(rows, pad).to(device) for rows in mbs] for path, mbs in minibatches.items()}
    for b in (b for bs in batches.values() for b in bs):
        b.visual["pixel_values"] = b.visual["pixel_values"].to(dtype)

    def update(path: str) -> None:
        for rows, batch in zip(minibatches[path], batches[path]):
            if path == "shared prefix":
                logp = sp.shared_prefix_logprobs(model, rows, batch.input_ids.shape[1], pad, True)[0]
            else:
                logp = token_logprobs(model, batch, True, packed=path.startswith("packed"))[0]
            adv = torch.linspace(-1, 1, len(rows), device=device)
            rl.policy_loss("clipped", logp, logp.detach(), adv, batch.action_mask).loss.backward()
        model.zero_grad(set_to_none=True)

    # on a CPU the process's CPU time (one thread: the work done, whatever else the machine runs); on a GPU wall time
    clock = time.perf_counter if device.type == "cuda" else time.process_time
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    for i in range(warmup + steps):  # the paths in turns: a shared machine's load drifts alike for all
        for path in PATHS:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = clock()
            update(path)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i >= warmup:
                times[path].append(clock() - t0)
    out: dict[str, dict] = {}
    for path in PATHS:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            update(path)
            peak = torch.cuda.max_memory_allocated(device) - before
        else:
            peak = tensor_peak(functools.partial(update, path))
        tokens = decoder_tokens(path, minibatches[path])
        out[path] = {
            "micro_batches": len(minibatches[path]),
            "update_s": statistics.median(times[path]),
            "decoder_tokens": tokens,
            "padding_share": max(0.0, 1 - real / tokens) if path != "shared prefix" else None,
            "peak_mib": peak / 2**20,
        }
    out["_meta"] = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "lengths": [t.completion_length for t in trajs],
        "minibatches": len(cut),
        "budget": budget,
        "real_tokens": real,
        "device": str(device),
    }
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--max-completion", type=int, default=512, help="the length limit (a few rows reach it)")
    parser.add_argument("--at-limit", type=int, default=2, help="completions of the step at the limit")
    parser.add_argument("--mini-batch-size", type=int, default=8)
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="the token budget (default: real tokens / row-count cuts)"
    )
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    mix = Mix(
        prompts=args.prompts,
        num_generations=args.num_generations,
        max_completion=args.max_completion,
        at_limit=args.at_limit,
        mini_batch_size=args.mini_batch_size,
        max_tokens=args.max_tokens,
    )
    r = bench(mix, steps=args.steps, warmup=args.warmup, dtype=getattr(torch, args.dtype))
    meta = r.pop("_meta")
    console = Console(width=140)
    lengths = sorted(meta["lengths"])
    console.print(
        f"policy update (forward + backward), Qwen2.5-VL layout, hidden {SHAPE.text_hidden}, {SHAPE.text_layers} "
        f"layers ({meta['parameters'] / 1e6:.1f} M parameters), {args.dtype}, {meta['device']}, "
        f"{torch.get_num_threads()} thread(s); {mix.prompts} prompts x G = {mix.num_generations} "
        f"({mix.image_tokens + mix.prompt_text + 2}-token prompts, one image), completions {lengths} "
        f"in {meta['minibatches']} mini-batches of <= {mix.mini_batch_size} rows (token budget {meta['budget']:,}); "
        f"{meta['real_tokens']:,} real tokens; "
        f"median of {args.steps}"
    )
    table = Table()
    for column in (
        "path",
        "micro-batches",
        "update (s)" if meta["device"] == "cuda" else "update (CPU s)",
        "decoder tokens",
        "padding share",
        "peak tensor MiB",
        "time / padded",
    ):
        table.add_column(column, justify="right")
    base = r["padded"]["update_s"]
    for path, x in r.items():
        share = "n/a" if x["padding_share"] is None else f"{x['padding_share']:.0%}"
        table.add_row(
            path,
            str(x["micro_batches"]),
            f"{x['update_s']:.3f}",
            f"{x['decoder_tokens']:,}",
            share,
            f"{x['peak_mib']:,.0f}",
            f"{x['update_s'] / base:.2f}x",
        )
    console.print(table)
    return 0
