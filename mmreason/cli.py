"""The `mmreason` command: one subcommand per module, each with `add_arguments(parser)` and `run(args)`.

Subcommand modules are imported only when used, so `mmreason list` does not pay for torch or
transformers start-up it does not need. This start-up time is the one reason the command's modules import
lazily: here by name, and inside ``run`` in each pack's ``cli.py`` (``mmreason data`` imports every one of them
to build its parser).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from mmreason.parallel.shutdown import end_process
from mmreason.terminal import printable

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tiny-model": (
        "mmreason.models.tiny",
        "write a tiny random-weight VLM checkpoint (Qwen2.5-VL, or --arch FAMILY; no download)",
    ),
    "list": ("mmreason.listing", "list a registry: tasks, rewards, or methods with their provenance"),
    "train": ("mmreason.train.cli", "GRPO-family RL training from a YAML recipe"),
    "data": ("mmreason.datacmd", "a task pack's data tools: synthetic generators and converters"),
    "eval": ("mmreason.eval.cli", "evaluate a model or run directory on task packs (lmms-eval layout)"),
    "reward": ("mmreason.rewarding.cli", "score one completion with a reward, printed as JSON"),
    "sft": ("mmreason.train.sft", "supervised fine-tuning (assistant tokens only) from a YAML recipe"),
    "bench": (
        "mmreason.bench",
        "benchmarks: grpo-step, grpo-vs-trl, eval-overhead, episodes, update-throughput, published, weight-push, ...",
    ),
    "plan": (
        "mmreason.plan.cli",
        "per-GPU memory of a recipe from the model's config.json (no weights): will it fit, and what would make it",
    ),
    "plot": ("mmreason.train.plot", "write PNG training curves of a run directory"),
    "vllm-serve": (
        "mmreason.rollout.backends.vllm_server",
        "serve a vLLM engine on this machine for training runs with rollout.vllm_mode=server",
    ),
    "env-serve": (
        "mmreason.rollout.env_server",
        "serve an environment (module:Factory) over HTTP, one session per episode, for runs in another process",
    ),
    "report": ("mmreason.health.cli", "one self-contained HTML report of a run or eval directory (or two compared)"),
    "export": (
        "mmreason.train.export",
        "a run's checkpoint as a Hugging Face model folder (LoRA merged, processor beside it) for transformers / vLLM",
    ),
}


def build_parser(chosen: str | None) -> argparse.ArgumentParser:
    """The `mmreason` parser, with the options of the ``chosen`` subcommand (only its module is imported)."""
    parser = argparse.ArgumentParser(prog="mmreason", description="GRPO-family RL for vision-language models")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if name == chosen:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except Exception as exc:
        # Errors raised on bad input name the file, sample or key: print them without a traceback
        # (MMREASON_DEBUG=1 shows it).
        if _is_user_error(exc) and not os.environ.get("MMREASON_DEBUG"):
            print(f"mmreason {args.command}: error: {printable(exc)}", file=sys.stderr)
            return int(getattr(exc, "exit_code", 2))  # a run stopped by SIGTERM: 143 (mmreason.train.signals)
        raise


def entry() -> None:
    """The process entry point (``python -m mmreason``, the ``mmreason`` script): ``main``, then the exit."""

    end_process(main())


# Raised on bad input by the standard library with the file named in the message (``[Errno 13] Permission denied:
# 'out/x'``); subclasses are not included on purpose (a ``UnicodeDecodeError`` names no file: readers word it).
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    KeyError,
    PermissionError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
)


def _is_user_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("mmreason") or type(exc) in USER_ERRORS


if __name__ == "__main__":
    sys.exit(main())
