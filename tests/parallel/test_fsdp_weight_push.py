"""Server mode's collective push from a sharded (FSDP2) policy, without vLLM: two CPU processes (gloo) hold a
model under torch ``fully_shard``; process 0 broadcasts it to two receiving ends (two servers' weights groups,
threads of its own) while process 1 only takes part in the gathers (``gather_along``). Each parameter is
gathered whole once per push on both processes (a second gather on one side would hang the other), cast to the
engines' dtype, and both ends receive the whole model. tests/rollout_vllm/test_vllm_server.py runs the same
push from ``accelerate launch`` into a real server."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.multiprocessing as mp
from torch import nn

from mmreason.rollout.backends.weight_group import free_port


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 6)
        self.blocks = nn.ModuleList([nn.Linear(6, 6) for _ in range(2)])
        self.head = nn.Linear(6, 10, bias=False)
        self.head.weight = self.embed.weight  # tied: travels once


def _receiving_end(port: int, got: dict) -> tuple:
    """A two-rank gloo group whose rank 0 (the engine's end) runs in a thread; returns the trainer's end."""
    import threading

    ends = {}

    def join(rank: int) -> None:
        store = torch.distributed.TCPStore("127.0.0.1", port, 2, rank == 0, timedelta(seconds=60))
        ends[rank] = torch.distributed.ProcessGroupGloo(store, rank, 2, timedelta(seconds=60))

    joining = threading.Thread(target=join, args=(0,), daemon=True)
    joining.start()
    join(1)
    joining.join(60)

    def receive(wire: list) -> int:
        from mmreason.rollout.backends.weight_group import buckets_from_wire, receive_buckets

        for name, t in receive_buckets(ends[0], 1, buckets_from_wire(wire), torch.device("cpu")):
            got[name] = t.clone()
        return len(wire)

    return ends[1], receive


def _process(rank: int, port: int, push_ports: list[int], out: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from mmreason.rollout.backends.weight_group import (
        broadcast_to_all,
        finish_beside,
        gather_along,
        policy_tensors,
        whole,
    )

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = Small()
    mesh = init_device_mesh("cpu", (2,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    with policy_tensors(model) as tensors:
        assert all(hasattr(t, "full_tensor") for _, t in tensors)  # sharded: DTensors
        expected = {name: whole(t).clone() for name, t in tensors}
    if rank == 0:
        got = [{}, {}]
        ends = [(*_receiving_end(p, got[k]), None) for k, p in enumerate(push_ports)]
        ends = [(group, 1, receive) for group, receive, _ in ends]
        for thread, box, error in broadcast_to_all(model, ends, 64, torch.bfloat16):
            assert error is None
            finish_beside(thread, box, time.monotonic() + 60, "the receiving end")
        torch.save({"expected": expected, "got": got}, out)
    else:
        gather_along(model)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def test_a_sharded_policy_reaches_two_servers_with_one_gather_per_tensor(tmp_path):
    out = tmp_path / "push.pt"
    ports = (free_port(), [free_port(), free_port()])
    mp.start_processes(_process, args=(*ports, str(out)), nprocs=2, join=True, start_method="fork")  # no re-import
    result = torch.load(out)
    expected, got = result["expected"], result["got"]
    assert list(expected) == ["embed.weight", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias"]
    for server in got:
        assert list(server) == list(expected)
        for name, t in expected.items():
            assert server[name].dtype == torch.bfloat16 and torch.equal(server[name], t.to(torch.bfloat16)), name
