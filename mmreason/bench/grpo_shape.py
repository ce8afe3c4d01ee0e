"""`mmreason bench grpo-shape`: GRPO steps of a random-init model of a named shape, built on the device.

Made for the first minutes on a lent GPU: Qwen2.5-VL-7B's published sizes (``--shape 7b``, 8.29 B parameters)
are built straight on the GPU in bf16 from the config (no checkpoint, no tokenizer, no download) and take
``--steps`` GRPO steps with the trainer's own pieces: HF generation of G short completions per prompt
(``rollout.generate.generate_groups``: each prompt's vision tower and prefill once, its KV cache expanded to its
G rows, every row on its own seed), a reward, group advantages (``rl.advantages``), the update (each group's
prompt encoded once, ``shared_prefix``; log-probs from the LM head chunk by chunk, ``rl.lm_head``; gradient
checkpointing on) and an AdamW step. It prints each step's time split, the generated and the updated tokens per
second and the peak GPU memory: whether a 7B policy's step fits one GPU, and how long it takes.

Prompts are random token ids with image pages of random pixels (``update_throughput.synthetic_group``); the
reward of a completion is the share of its tokens with an even id, a pure function of the sampled tokens that
differs within a group, so every group has a learning signal. The optimizer steps the bf16 weights themselves
by default (``--master-weights`` adds the trainer's fp32 copies): fp32 masters and moments of 8.29 B parameters
take 99 GB, more than one H100 holds, where the bf16 weights, gradients and moments take 66 GB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from mmreason import rl
from mmreason.bench.update_throughput import SHAPES, Workload, build_model, synthetic_group
from mmreason.models.loading import cpu_attention, resolve_attn_implementation, resolve_dtype
from mmreason.rollout import shared_prefix as sp
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings, generate_groups, suppressed_token_ids
from mmreason.rollout.prompts import PromptInputs
from mmreason.train.precision import MasterWeightAdamW, needs_master_weights
from mmreason.types import Sample, Trajectory


@dataclass(frozen=True)
class IdTable:
    """The tokenizer that generation reads (special-token ids, end and pad) over a shape's id table: the
    random-init model's completions are random ids, kept as ids and never decoded to words."""

    ids: dict[str, int]
    unk_token_id: None = None

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return self.ids.get(token)

    @property
    def eos_token_id(self) -> int:
        return self.ids["<|im_end|>"]

    @property
    def pad_token_id(self) -> int:
        return self.ids["<|endoftext|>"]

    def decode(self, token_ids: Any, skip_special_tokens: bool = True) -> str:
        return ""


@dataclass
class StepRecord:
    """One step's times (generation, forward and backward, clipping and AdamW), token counts, loss and norm."""

    generate_s: float
    update_s: float  # forward and backward of every trajectory
    optimizer_s: float
    step_s: float
    completion_tokens: int  # generated this step
    sequence_tokens: int  # prompt and completion tokens the update forwards
    loss: float
    grad_norm: float  # before clipping to 1.0, as the trainer's max_grad_norm


@dataclass
class ShapeRun:
    """A bench run: what was built and how it stepped (``--json`` writes it with the medians)."""

    shape: str
    parameters: int
    device_name: str
    dtype: str
    attention: str
    prompts: int
    num_generations: int
    max_new_tokens: int
    prompt_length: int
    gradient_checkpointing: bool
    chunked_head: bool
    master_weights: bool
    shared_prefix: bool
    build_s: float
    steps: list[StepRecord] = field(default_factory=list)
    peak_memory_gib: float | None = None  # the whole run's, the model's build included

    @property
    def step_s(self) -> float:
        return statistics.median(s.step_s for s in self.steps)

    @property
    def generate_tokens_per_s(self) -> float:
        return statistics.median(s.completion_tokens / s.generate_s for s in self.steps)

    @property
    def update_tokens_per_s(self) -> float:
        return statistics.median(s.sequence_tokens / s.update_s for s in self.steps)

    def summary(self) -> dict:
        """Every field and the medians, as ``--json`` writes them."""
        return asdict(self) | {
            "step_s_median": self.step_s,
            "generate_tokens_per_s": self.generate_tokens_per_s,
            "update_tokens_per_s": self.update_tokens_per_s,
        }


def synthetic_prompts(w: Workload, ids: dict[str, int], vocab: int, count: int) -> list[PromptInputs]:
    """``count`` different prompts of random text ids and ``w.pages`` images of random pixels each."""
    prompts = []
    for i in range(count):
        t = synthetic_group(Workload(w.pages, w.image_tokens, w.prompt_text, 1, 1), ids, vocab, seed=i)[0]
        p, types = t.prompt_length, t.mm_token_type_ids
        assert types is not None  # synthetic_group sets them
        sample = Sample(id=f"bench-{i}", messages=[])
        prompts.append(PromptInputs(sample, t.token_ids[:p], types[:p], dict(t.visual[0])))
    return prompts


def even_id_share(trajectories: list[Trajectory]) -> torch.Tensor:
    """[N] the share of each completion's tokens with an even id (0 for an empty completion)."""
    out = []
    for t in trajectories:
        done = t.token_ids[t.prompt_length :]
        out.append(float(done.remainder(2).eq(0).float().mean()) if done.numel() else 0.0)
    return torch.tensor(out)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class _Policy:
    """What a step works on: the model and its optimizer, the id table and the sampler's settings."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    tokenizer: IdTable
    settings: GenerationSettings
    num_generations: int
    dtype: torch.dtype
    shared_prefix: bool
    chunked_head: bool
    seed: int

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def _update(policy: _Policy, trajectories: list[Trajectory]) -> float:
    """Backward of the policy loss of one on-policy pass over every trajectory (old log-probs = the current
    ones, detached, as with one iteration per step); returns the loss."""
    device, dtype, pad = policy.device, policy.dtype, policy.tokenizer.pad_token_id
    rewards = even_id_share(trajectories)
    group_ids = torch.tensor([t.group_id for t in trajectories])
    adv = rl.advantages("grpo", rewards, group_ids).advantages.to(device)
    for t in trajectories:
        t.visual = [{k: v.to(device, dtype) if v.is_floating_point() else v.to(device) for k, v in t.visual[0].items()}]
    batch = collate(trajectories, pad).to(device)
    if "pixel_values" in batch.visual:
        batch.visual["pixel_values"] = batch.visual["pixel_values"].to(dtype)
    suppressed, chunked = suppressed_token_ids(policy.tokenizer), policy.chunked_head
    if policy.shared_prefix:
        width = batch.input_ids.shape[1]
        logp = sp.shared_prefix_logprobs(
            policy.model, trajectories, width, pad, suppressed=suppressed, chunked=chunked
        )[0]
    else:
        logp = token_logprobs(policy.model, batch, suppressed=suppressed, chunked=chunked)[0]
    out = rl.policy_loss("clipped", logp, logp.detach(), adv, batch.action_mask)
    out.loss.backward()
    return float(out.loss.detach())


def _step(policy: _Policy, prompts: list[PromptInputs], step: int) -> StepRecord:
    """One GRPO step (generate in eval mode with the KV cache, update in train mode, gradient clipping and the
    AdamW step): its times, token counts, loss and gradient norm."""
    device = policy.device
    _sync(device)
    t0 = time.perf_counter()
    policy.model.eval()
    seeds = [policy.seed * 1_000_003 + step * 1009 + i for i in range(len(prompts))]
    trajectories = generate_groups(
        policy.model,
        SimpleNamespace(tokenizer=policy.tokenizer),
        prompts,
        list(range(len(prompts))),
        policy.num_generations,
        settings=policy.settings,
        seeds=seeds,
    )
    policy.model.train()
    _sync(device)
    t1 = time.perf_counter()
    loss = _update(policy, trajectories)
    _sync(device)
    t2 = time.perf_counter()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0))
    policy.optimizer.step()
    policy.optimizer.zero_grad(set_to_none=True)
    _sync(device)
    t3 = time.perf_counter()
    return StepRecord(
        generate_s=t1 - t0,
        update_s=t2 - t1,
        optimizer_s=t3 - t2,
        step_s=t3 - t0,
        completion_tokens=sum(int(t.action_mask.sum()) for t in trajectories),
        sequence_tokens=sum(int(t.token_ids.numel()) for t in trajectories),
        loss=loss,
        grad_norm=grad_norm,
    )


# One image of 64 visual tokens and 64 text tokens per prompt, G = 4 completions of at most 32 tokens.
SHORT = Workload(pages=1, image_tokens=64, prompt_text=64, completion_len=32, num_generations=4)


def grpo_shape(
    shape: str = "tiny",
    workload: Workload = SHORT,
    *,
    prompts: int = 2,
    steps: int = 2,
    dtype: str = "auto",
    attn: str = "auto",
    gradient_checkpointing: bool = True,
    chunked_head: bool = True,
    master_weights: bool = False,
    seed: int = 0,
) -> ShapeRun:
    """``steps`` GRPO steps of a random-init ``shape`` model with ``prompts`` prompts of ``workload`` and
    G = ``workload.num_generations`` completions of at most ``workload.completion_len`` tokens each."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = resolve_dtype(dtype)
    attn_name = cpu_attention(resolve_attn_implementation(attn, torch_dtype), torch_dtype)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    model, ids = build_model(shape, torch_dtype, attn_name, device, seed=seed)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    master = master_weights and needs_master_weights(model.parameters())
    optimizer = (MasterWeightAdamW if master else torch.optim.AdamW)(model.parameters(), lr=1e-6, fused=True)
    _sync(device)
    policy = _Policy(
        model,
        optimizer,
        IdTable(ids),
        GenerationSettings(max_new_tokens=workload.completion_len, temperature=1.0),
        workload.num_generations,
        torch_dtype,
        shared_prefix=sp.applies(model, []),
        chunked_head=chunked_head,
        seed=seed,
    )
    inputs = synthetic_prompts(workload, ids, model.config.text_config.vocab_size, prompts)
    report = ShapeRun(
        shape=shape,
        parameters=sum(p.numel() for p in model.parameters()),
        device_name=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        dtype=str(torch_dtype).removeprefix("torch."),
        attention=attn_name,
        prompts=prompts,
        num_generations=workload.num_generations,
        max_new_tokens=workload.completion_len,
        prompt_length=inputs[0].length,
        gradient_checkpointing=gradient_checkpointing,
        chunked_head=chunked_head,
        master_weights=master,
        shared_prefix=policy.shared_prefix,
        build_s=time.perf_counter() - t0,
    )
    for step in range(1, steps + 1):
        report.steps.append(_step(policy, inputs, step))
    if device.type == "cuda":
        report.peak_memory_gib = torch.cuda.max_memory_allocated(device) / 2**30
    return report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default=None, help="model shape (default: 7b on CUDA, tiny on CPU)"
    )
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--num-generations", type=int, default=4, help="completions per prompt (G)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="completion length limit")
    parser.add_argument("--pages", type=int, default=1, help="images per prompt")
    parser.add_argument("--image-tokens", type=int, default=64, help="merged visual tokens per image")
    parser.add_argument("--prompt-text", type=int, default=64, help="text tokens per prompt")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on a GPU that has it, else fp32) | a dtype")
    parser.add_argument("--attn", default="auto", help="auto | sdpa | eager | flash_attention_2")
    parser.add_argument("--no-gradient-checkpointing", action="store_true")
    parser.add_argument("--logits-head", action="store_true", help="whole logits kept for backward, not chunks")
    parser.add_argument("--master-weights", action="store_true", help="the trainer's fp32 copies of bf16 weights")
    parser.add_argument("--json", default=None, help="also write the figures to this file")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    shape = args.shape or ("7b" if torch.cuda.is_available() else "tiny")
    w = Workload(args.pages, args.image_tokens, args.prompt_text, args.max_new_tokens, args.num_generations)
    r = grpo_shape(
        shape,
        w,
        prompts=args.prompts,
        steps=args.steps,
        dtype=args.dtype,
        attn=args.attn,
        gradient_checkpointing=not args.no_gradient_checkpointing,
        chunked_head=not args.logits_head,
        master_weights=args.master_weights,
    )
    console = Console(width=140)
    console.print(
        f"GRPO steps, Qwen2.5-VL {shape} shape ({r.parameters / 1e9:.2f} B parameters, random init, built in "
        f"{r.build_s:.1f} s): {r.device_name}, {r.dtype}, attention {r.attention}; {r.prompts} prompts x "
        f"{r.num_generations} completions of <= {r.max_new_tokens} tokens on a {r.prompt_length}-token prompt; "
        f"gradient checkpointing {'on' if r.gradient_checkpointing else 'off'}, "
        f"{'chunked' if r.chunked_head else 'whole-logits'} head, "
        f"{'shared prefix' if r.shared_prefix else 'plain forward'}, "
        f"AdamW on {'fp32 master weights' if r.master_weights else 'the model weights'}"
    )
    table = Table()
    columns = ("step", "generate (s)", "update (s)", "optimizer (s)", "step (s)", "generated tok/s", "update tok/s")
    for col in (*columns, "loss", "grad norm"):
        table.add_column(col, justify="right")
    for i, s in enumerate(r.steps, 1):
        table.add_row(
            str(i),
            f"{s.generate_s:.2f}",
            f"{s.update_s:.2f}",
            f"{s.optimizer_s:.2f}",
            f"{s.step_s:.2f}",
            f"{s.completion_tokens / s.generate_s:,.0f}",
            f"{s.sequence_tokens / s.update_s:,.0f}",
            f"{s.loss:.4g}",
            f"{s.grad_norm:.4g}",
        )
    console.print(table)
    peak = f"{r.peak_memory_gib:.1f} GiB" if r.peak_memory_gib is not None else "n/a (CPU)"
    console.print(f"median step {r.step_s:.2f} s; peak GPU memory {peak}")
    if args.json:
        Path(args.json).write_text(json.dumps(r.summary(), indent=1))
    return 0
