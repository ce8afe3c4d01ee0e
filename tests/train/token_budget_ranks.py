"""One of two gloo processes for tests/train/test_token_budget.py: cut its own rows under a 40-token budget
(process 1 holds fewer) and write the micro-batches to OUT/RANK.json. Usage: RANK PORT OUT."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import torch
import torch.distributed as dist

from mmreason.train.token_budget import micro_batches
from mmreason.types import Trajectory

SPECS = {  # (group id, tokens) per row
    0: [(0, 5), (0, 7), (1, 30), (1, 20), (2, 12), (2, 15)],
    1: [(0, 5), (0, 7), (2, 12), (2, 15)],
}


def main(rank: int, port: int, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        trajs = [
            Trajectory(
                sample_id=f"s{g}",
                group_id=g,
                token_ids=torch.zeros(n, dtype=torch.long),
                action_mask=torch.ones(n, dtype=torch.long),
                prompt_length=1,
                completion_text="",
            )
            for g, n in SPECS[rank]
        ]
        accelerator = types.SimpleNamespace(num_processes=2, device=torch.device("cpu"))
        chunks = micro_batches(
            accelerator, [list(range(len(trajs)))], trajs, mini_batch_size=16, max_tokens=40, most_parts=1
        )
        (out / f"{rank}.json").write_text(json.dumps(chunks))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
