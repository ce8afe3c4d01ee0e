"""`mmreason plan RECIPE [key=value ...] --gpus N --gpu-memory GB`: will the run fit, before it is launched.

Reads the recipe (and its overrides) as ``mmreason train`` does, the model's sizes from its ``config.json``
(a local folder) or from the built-in published sizes (a hub id; ``plan/shapes.py``), and prints the per-GPU
memory of each item (``plan/memory.py``), the phase that peaks, a verdict line and, when it does not fit, the
settings after which it would. Nothing is loaded, allocated or downloaded.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Literal

from mmreason.plan.memory import GIB, Plan, RunSettings, plan, what_fits
from mmreason.plan.shapes import ModelShape, load_shape

if TYPE_CHECKING:
    from mmreason.train.config import TrainConfig

PIXELS_PER_TOKEN = 28 * 28  # a visual token is 2 x 2 patches of 14 px


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a YAML recipe, e.g. configs/generic/grpo.yaml")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides, as for mmreason train")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs (processes) of the launch")
    parser.add_argument("--gpu-memory", type=float, default=80.0, help="memory of one GPU in GiB (80 for an H100)")
    launch = parser.add_mutually_exclusive_group()
    launch.add_argument(
        "--fsdp", action="store_true", help="FSDP2 (configs/accelerate/fsdp.yaml); the default when --gpus > 1"
    )
    launch.add_argument("--ddp", action="store_true", help="DDP (configs/accelerate/ddp.yaml)")
    parser.add_argument(
        "--mixed-precision",
        choices=("no", "bf16", "fp16"),
        default=None,
        help="accelerate's mixed_precision (default: bf16 with --fsdp / --ddp, as the shipped configs; else no)",
    )
    parser.add_argument(
        "--visual-tokens",
        type=int,
        default=None,
        help="visual tokens of a prompt (default: one image at data.max_pixels, within data.max_prompt_length)",
    )
    parser.add_argument(
        "--cpu", action="store_true", help="plan CPU processes (model.dtype auto: fp32; no GPU allowance)"
    )
    parser.add_argument("--json", action="store_true", help="the plan as JSON")


def settings_from(cfg: TrainConfig, args: argparse.Namespace) -> RunSettings:
    """The memory-relevant settings of a loaded ``TrainConfig`` and the launch flags."""
    gpus = max(1, args.gpus)
    sharding: Literal["single", "ddp", "fsdp"] = (
        "fsdp" if args.fsdp or (gpus > 1 and not args.ddp) else "ddp" if args.ddp else "single"
    )
    device: Literal["cuda", "cpu"] = "cpu" if args.cpu else "cuda"
    dtype = cfg.model.dtype if cfg.model.dtype != "auto" else ("float32" if args.cpu else "bfloat16")
    mixed: Literal["no", "bf16", "fp16"] = args.mixed_precision or (
        "bf16" if sharding != "single" and not args.cpu else "no"
    )
    data, rollout = cfg.data, cfg.rollout
    pixels = data.max_pixels or 12845056  # the Qwen processors' default cap
    visual = args.visual_tokens if args.visual_tokens is not None else pixels // PIXELS_PER_TOKEN
    attn = cfg.model.attn_implementation
    attention: Literal["flash", "sdpa"] = (
        "flash" if attn == "flash_attention_2" or (attn == "auto" and not args.cpu) else "sdpa"
    )
    return RunSettings(
        gpus=gpus,
        sharding=sharding,
        device=device,
        dtype=dtype,
        mixed_precision=mixed,
        master_weights=cfg.model.master_weights,
        gradient_checkpointing=cfg.model.gradient_checkpointing,
        lora=cfg.model.lora,
        lora_r=cfg.model.lora_r,
        freeze_vision_tower=cfg.model.freeze_vision_tower,
        beta=cfg.algorithm.beta,
        mini_batch_size=cfg.mini_batch_size,
        num_generations=rollout.num_generations,
        prompts_per_step=cfg.prompts_per_step,
        prompt_tokens=data.max_prompt_length,
        completion_tokens=rollout.max_completion_length * max(1, rollout.max_turns),
        visual_tokens=min(visual, data.max_prompt_length),
        shared_prefix=cfg.shared_prefix,
        attention=attention,
        rollout_backend=rollout.backend,
        vllm_mode=rollout.vllm_mode,
        vllm_gpu_memory_utilization=rollout.vllm_gpu_memory_utilization,
        vllm_sleep=rollout.vllm_enable_sleep_mode,
        fused_optimizer=cfg.optim == "adamw_torch_fused",
    )


def verdict(p: Plan, changes: list[str], fixed: Plan | None) -> str:
    head = f"peak {p.peak / GIB:.1f} GiB per GPU ({p.peak_phase}) of {p.gpu_memory_gib:g} GiB"
    if p.fits:
        return f"fits: {head}"
    if fixed is not None and fixed.fits:
        return f"does not fit: {head}; fits with {', '.join(changes)} (peak {fixed.peak / GIB:.1f} GiB)"
    lowest = f" (lowest: {fixed.peak / GIB:.1f} GiB with {', '.join(changes)})" if fixed and changes else ""
    return f"does not fit: {head}; no setting here makes it fit{lowest}: more GPUs or memory"


def print_plan(shape: ModelShape, source: str, s: RunSettings, p: Plan, line: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    launch = {"single": "one process", "ddp": f"DDP over {s.gpus}", "fsdp": f"FSDP2 over {s.gpus}"}[s.sharding]
    console.print(
        f"{shape.family}, {shape.parameters() / 1e9:.2f} B parameters ({source}); {launch}, {s.dtype}"
        f"{', mixed precision ' + s.mixed_precision if s.mixed_precision != 'no' else ''}; mini-batch "
        f"{s.mini_batch_size} x ({s.prompt_tokens} prompt + {s.completion_tokens} completion tokens), "
        f"{s.visual_tokens} visual; gradient checkpointing {'on' if s.gradient_checkpointing else 'off'}"
    )
    table = Table(title=f"memory per {'process' if s.device == 'cpu' else 'GPU'}")
    table.add_column("item")
    table.add_column("GiB", justify="right")
    table.add_column("alive in")
    table.add_column("how")
    for item in p.items:
        if item.bytes:
            table.add_row(item.name, f"{item.bytes / GIB:.2f}", ", ".join(item.phases), item.note)
    for phase, total in p.totals.items():
        table.add_row(f"[bold]total, {phase}[/bold]", f"[bold]{total / GIB:.2f}[/bold]", "", "")
    console.print(table)
    console.print(line)


def run(args: argparse.Namespace) -> int:
    from mmreason.config import load_config
    from mmreason.train.config import TrainConfig

    cfg = load_config(TrainConfig, args.config, args.overrides)
    shape, source = load_shape(cfg.model.name_or_path)
    s = settings_from(cfg, args)
    p = plan(shape, s, args.gpu_memory)
    changes, fixed = ([], None) if p.fits else what_fits(shape, s, args.gpu_memory)
    line = verdict(p, changes, fixed)
    if args.json:
        out = {
            "model": {"source": source, "parameters": shape.parameters(), **asdict(shape)},
            "settings": asdict(replace(s)),
            "items": [{"name": i.name, "gib": i.bytes / GIB, "phases": list(i.phases), "how": i.note} for i in p.items],
            "totals_gib": {k: v / GIB for k, v in p.totals.items()},
            "peak_gib": p.peak / GIB,
            "peak_phase": p.peak_phase,
            "gpu_memory_gib": args.gpu_memory,
            "fits": p.fits,
            "fits_with": changes if fixed is not None and fixed.fits else None,
            "verdict": line,
        }
        print(json.dumps(out, indent=1))
    else:
        print_plan(shape, source, s, p, line)
    return 0 if p.fits else 1
