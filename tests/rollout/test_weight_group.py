"""The weights group's bucketing (``rollout.vllm_weight_sync: collective``) without vLLM: the bucket layout,
and a real gloo broadcast of a policy between two ends of a group (two threads of this process) in small
buckets, which must deliver every tensor bit for bit under its checkpoint name."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
import torch
from torch import nn

from mmreason.rollout.backends.weight_group import (
    ALIGN,
    broadcast,
    broadcast_beside,
    bucket_size,
    buckets_from_wire,
    buckets_to_wire,
    finish_beside,
    free_port,
    plan_buckets,
    policy_tensors,
    receive_buckets,
    send_buckets,
    tensor_specs,
)


def test_buckets_are_bounded_aligned_and_a_large_tensor_travels_alone():
    specs = [
        ("a", torch.float32, (10,)),
        ("b", torch.float32, (3, 5)),
        ("big", torch.float32, (100,)),
        ("c", torch.bfloat16, (7,)),
        ("d", torch.int64, (2,)),
    ]
    buckets = plan_buckets(specs, bucket_bytes=128)
    assert [[e.name for e in b] for b in buckets] == [["a", "b"], ["big"], ["c", "d"]]
    a, b = buckets[0]
    assert (a.offset, a.nbytes, b.offset, b.nbytes) == (0, 40, 48, 60)  # 40 bytes rounded up to 48
    assert all(e.offset % ALIGN == 0 for bucket in buckets for e in bucket)
    assert [bucket_size(b) for b in buckets] == [108, 400, 32]  # c: 14 bytes, d at 16 + 16
    assert bucket_size(buckets[1]) > 128  # alone, larger than the bound
    assert buckets_from_wire(buckets_to_wire(buckets)) == buckets
    with pytest.raises(ValueError, match="dtype"):
        buckets_from_wire([[["x", "nonsense", [1], 0]]])
    with pytest.raises(ValueError, match="bad entry"):
        buckets_from_wire([[["x", "float32", [1], -4]]])


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.proj = nn.Linear(6, 6)
        self.head = nn.Linear(6, 11, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.arange(3, dtype=torch.float64))


def test_policy_tensors_name_each_tensor_once_and_merge_lora_only_inside_the_block():
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = Tied()
    with policy_tensors(base) as tensors:
        assert [n for n, _ in tensors] == ["scale", "embed.weight", "proj.weight", "proj.bias"]  # head tied
    model = get_peft_model(Tied(), LoraConfig(r=2, target_modules=["proj"], init_lora_weights=False))
    x = torch.randn(4, 6)
    lora_out = model.base_model.model.proj(x).detach()
    plain = model.base_model.model.proj.base_layer.weight.detach().clone()
    with policy_tensors(model) as tensors:
        names = dict(tensors)
        assert "proj.weight" in names and not any("lora" in n or "base_layer" in n for n in names)
        merged = names["proj.weight"].clone()
    assert not torch.allclose(merged, plain)  # the adapter's delta was in it ...
    assert torch.allclose(model.base_model.model.proj.base_layer.weight, plain, atol=1e-6)  # ... and is out again
    assert torch.allclose(x @ merged.T + names["proj.bias"], lora_out, atol=1e-6)


def test_a_gloo_broadcast_in_small_buckets_delivers_every_tensor_exactly():
    torch.manual_seed(0)
    model = Tied()
    with policy_tensors(model) as tensors:
        sent = {n: t.clone() for n, t in tensors}
        buckets = plan_buckets(tensor_specs(tensors), bucket_bytes=64)  # 5 buckets for 4 tensors
        assert len(buckets) > 3
        port, got, errors = free_port(), {}, []
        wire = buckets_to_wire(buckets)

        def engine_end():
            try:
                store = torch.distributed.TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=30))
                group = torch.distributed.ProcessGroupGloo(store, 0, 2, timedelta(seconds=30))
                for name, t in receive_buckets(group, 1, buckets_from_wire(wire), torch.device("cpu")):
                    got[name] = t.clone()
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        thread = threading.Thread(target=engine_end, daemon=True)
        thread.start()
        store = torch.distributed.TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=30))
        group = torch.distributed.ProcessGroupGloo(store, 1, 2, timedelta(seconds=30))
        error = send_buckets(group, 1, buckets, tensors, torch.device("cpu"), peer_alive=thread.is_alive)
        thread.join(30)
    assert error is None and not errors
    assert list(got) == list(sent)
    for name, t in sent.items():
        assert got[name].dtype == t.dtype and torch.equal(got[name], t), name


def test_broadcast_beside_delivers_the_policy_to_the_call_running_beside_it():
    """The sender's half of both weight pushes (the in-process engine's and the server client's): the receiving
    call gets the bucket layout as wire lists and receives, beside the broadcast, every tensor bit for bit."""
    torch.manual_seed(0)
    model = Tied()
    with policy_tensors(model) as tensors:
        sent = {n: t.clone() for n, t in tensors}
    port, groups, got = free_port(), {}, {}

    def join(rank: int) -> None:
        store = torch.distributed.TCPStore("127.0.0.1", port, 2, rank == 0, timedelta(seconds=30))
        groups[rank] = torch.distributed.ProcessGroupGloo(store, rank, 2, timedelta(seconds=30))

    joining = threading.Thread(target=join, args=(0,), daemon=True)
    joining.start()
    join(1)
    joining.join(30)

    def receive(wire: list) -> int:
        for name, t in receive_buckets(groups[0], 1, buckets_from_wire(wire), torch.device("cpu")):
            got[name] = t.clone()
        return len(wire)

    thread, box, error = broadcast_beside(model, groups[1], 1, 64, receive)
    buckets = finish_beside(thread, box, time.monotonic() + 30, "the receiving end")
    assert error is None and buckets == len(plan_buckets([(n, t.dtype, tuple(t.shape)) for n, t in sent.items()], 64))
    assert isinstance(buckets, int) and buckets > 3
    assert list(got) == list(sent)
    for name, t in sent.items():
        assert got[name].dtype == t.dtype and torch.equal(got[name], t), name


class _Work:
    """A broadcast's handle that reports completion after ``polls`` checks (never, when None)."""

    def __init__(self, polls):
        self.polls, self.waited = polls, False

    def is_completed(self):
        if self.polls is None:
            return False
        self.polls -= 1
        return self.polls < 0

    def wait(self):
        self.waited = True


class _Group:
    def __init__(self, work):
        self.work = work

    def broadcast(self, tensors, opts):
        return self.work


def test_a_send_marked_complete_after_the_receiver_answered_is_not_an_error():
    """The receiver took every byte and its call ended before this side's send was marked complete (a loaded
    machine): the broadcast finishes. A receiver gone while the send stays pending past the grace is an error."""
    late = _Work(polls=200)
    broadcast(_Group(late), torch.zeros(4, dtype=torch.uint8), 0, peer_alive=lambda: False, peer_gone_grace_s=5.0)
    assert late.waited
    with pytest.raises(RuntimeError, match="stopped receiving"):
        broadcast(_Group(_Work(None)), torch.zeros(4, dtype=torch.uint8), 0, lambda: False, peer_gone_grace_s=0.05)


def _groups(count: int) -> list[dict]:
    """``count`` two-rank gloo groups between two threads of this process: ``{0: engine's end, 1: trainer's}``."""
    out = []
    for _ in range(count):
        port, ends = free_port(), {}

        def join(rank: int, port=port, ends=ends) -> None:
            store = torch.distributed.TCPStore("127.0.0.1", port, 2, rank == 0, timedelta(seconds=30))
            ends[rank] = torch.distributed.ProcessGroupGloo(store, rank, 2, timedelta(seconds=30))

        joining = threading.Thread(target=join, args=(0,), daemon=True)
        joining.start()
        join(1)
        joining.join(30)
        out.append(ends)
    return out


def test_one_push_to_two_servers_gathers_each_tensor_once_and_casts_to_the_engine_dtype(monkeypatch):
    """Server mode with two servers and a bf16 engine: each tensor is gathered whole once per push (under
    FSDP2 the other processes gather once too, ``gather_along``), travels in the engine's dtype (floating
    tensors only), and both servers receive every tensor equal to the trainer's cast to bf16."""
    from mmreason.rollout.backends import weight_group
    from mmreason.rollout.backends.weight_group import broadcast_to_all

    torch.manual_seed(0)
    model = Tied()
    model.register_buffer("steps", torch.arange(5))  # an integer buffer travels as it is
    with policy_tensors(model) as tensors:
        sent = {n: t.clone() for n, t in tensors}
    gathers, real_whole = [], weight_group.whole
    monkeypatch.setattr(weight_group, "whole", lambda t: gathers.append(1) or real_whole(t))
    groups, got = _groups(2), [{}, {}]

    def receiver(k: int):
        def receive(wire: list) -> int:
            for name, t in receive_buckets(groups[k][0], 1, buckets_from_wire(wire), torch.device("cpu")):
                got[k][name] = t.clone()
            return len(wire)

        return receive

    ends = [(groups[k][1], 1, receiver(k)) for k in range(2)]
    results = broadcast_to_all(model, ends, 64, torch.bfloat16)
    for thread, box, error in results:
        assert error is None and finish_beside(thread, box, time.monotonic() + 30, "the receiving end") > 3
    assert len(gathers) == len(sent)  # once per tensor, not once per server
    for k in range(2):
        assert list(got[k]) == list(sent)
        for name, t in sent.items():
            want = t.to(torch.bfloat16) if t.is_floating_point() else t
            assert got[k][name].dtype == want.dtype and torch.equal(got[k][name], want), (k, name)
