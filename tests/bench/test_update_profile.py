"""`mmreason bench update-throughput --profile`: the LM head's timing hook sits where the forward path calls the
head (``rollout.head``), so a profiled update records its head calls and completes."""

from __future__ import annotations

import torch

from mmreason.bench.update_profile import _timed_logprobs, _Timer, profile_update
from mmreason.bench.update_throughput import Workload, build_model, synthetic_group
from mmreason.rollout import shared_prefix as sp

SMALL = Workload(pages=1, image_tokens=4, prompt_text=8, completion_len=4, num_generations=2)


def test_the_head_hook_counts_every_head_call_of_a_shared_prefix_forward():
    torch.manual_seed(0)
    model, ids = build_model("tiny", torch.float32, "sdpa", torch.device("cpu"))
    rows = synthetic_group(SMALL, ids, model.get_output_embeddings().weight.shape[0])
    width = max(int(t.token_ids.numel()) for t in rows)
    timer = _Timer()
    with _timed_logprobs(timer):
        sp.shared_prefix_logprobs(model, rows, width, ids["<|endoftext|>"], True)
    assert len(timer.seconds["lm head + log-softmax"]) >= 1  # the hook ran: the head was called through it
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    parts = profile_update(model, rows, ids["<|endoftext|>"], optimizer, SMALL, steps=1)
    assert {"lm head", "backward", "optimizer step"} <= set(parts["seconds"])
    assert parts["update_flops"] > 0
