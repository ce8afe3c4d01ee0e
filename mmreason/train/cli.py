"""`mmreason train CONFIG [key=value ...]` (also under `accelerate launch -m mmreason train ...`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mmreason.config import load_config
from mmreason.train.config import TrainConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a YAML recipe, e.g. configs/quickstart.yaml")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. rollout.temperature=0.7 max_steps=20"
    )


def run(args: argparse.Namespace) -> int:
    # the whole trainer loads when the command runs, not for `mmreason train --help` (mmreason/cli.py)
    from mmreason.parallel.shutdown import finish_processes
    from mmreason.train.grpo import train

    cfg = load_config(TrainConfig, args.config, args.overrides)
    finished = train(cfg, config_dir=str(Path(args.config).resolve().parent))
    finish_processes(finished.accelerator)  # every rank ends in order and exits 0
    return 0
