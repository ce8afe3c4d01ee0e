"""`mmreason bench NAME`: benchmarks that give later speed work a baseline (figures, not assertions)."""

from __future__ import annotations

import argparse
import importlib

# name -> (module with add_arguments/run, one-line help)
BENCHES = {
    "grpo-step": ("mmreason.bench.grpo_step", "time split of one GRPO step on a fixed tiny config"),
    "episodes": (
        "mmreason.bench.episodes",
        "multi-turn episodes of a task with an environment, one at a time against played together",
    ),
    "eval-overhead": ("mmreason.bench.eval_overhead", "evaluation harness vs bare batched generate"),
    "grpo-vs-trl": ("mmreason.bench.grpo_vs_trl", "GRPO step time against TRL's GRPOTrainer, same work (needs trl)"),
    "published": (
        "mmreason.bench.published",
        "re-scoring 10,000 saved answers per published benchmark; --overhead: harness time of a model run",
    ),
    "update-throughput": (
        "mmreason.bench.update_throughput",
        "policy-update tokens/s and MFU of a random-init model (3b shape on a GPU)",
    ),
    "grpo-shape": (
        "mmreason.bench.grpo_shape",
        "GRPO steps (generate, update) of a random-init model built on the device (7b shape on a GPU)",
    ),
    "server-body": (
        "mmreason.bench.server_body",
        "a hostile vllm-serve body: parsed whole against refused by the shape count",
    ),
    "report": (
        "mmreason.bench.report_size",
        "mmreason report of a synthetic long run (time, peak RSS, size); HealthMonitor.check per step",
    ),
    "server-clients": (
        "mmreason.bench.server_clients",
        "several clients of one vllm-serve at once against one after another, 1 and 2 engines",
    ),
    "weight-push": (
        "mmreason.bench.weight_push",
        "a weight push into a vLLM engine: process group in buckets vs a safetensors directory",
    ),
    "vllm-requests": (
        "mmreason.bench.vllm_requests",
        "one vLLM engine call with a vocabulary-sized allowed_token_ids per request vs the engine-wide mask",
    ),
    "plan-check": (
        "mmreason.bench.plan_check",
        "mmreason plan's predicted peak memory against one measured GRPO update (tiny, base, qwen-vocab)",
    ),
    "fsdp-memory": (
        "mmreason.bench.fsdp_memory",
        "the FSDP2 update's peak memory on CPU processes, before and after the sharded-update memory savers",
    ),
    "packing": (
        "mmreason.bench.packing",
        "the update pass padded vs packed (padding-free) vs shared prefix on long-tailed completions",
    ),
    "async-generation": (
        "mmreason.bench.async_generation",
        "GRPO step time with generation one step off the update vs synchronous, engine and trainer on own cores",
    ),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="bench", required=True, metavar="NAME")
    for name, (module, help_text) in BENCHES.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_bench_module=module)
        try:
            importlib.import_module(module).add_arguments(p)
        except ImportError as exc:
            p.set_defaults(_bench_missing=f"{exc} (install the dev extra: pip install -e '.[dev]')")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "_bench_missing", None):
        print(f"mmreason bench {args.bench}: {args._bench_missing}")
        return 2
    return int(importlib.import_module(args._bench_module).run(args) or 0)
