"""The chunked LM head computes in the run's precision: autocast's dtype when autocast is on (accelerate's
``mixed_precision``), else the weight's. Before, fp32 hidden states (what accelerate's autocast wrapper returns)
met a bf16 head weight in one matmul and the first update died (``expected m1 and m2 to have the same dtype``)."""

from __future__ import annotations

import torch

from mmreason.rl.lm_head import compute_dtype, logprobs_from_hidden
from mmreason.rl.logits import logprobs_from_logits


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(7, 16, generator=g)
    weight = torch.randn(50, 16, generator=g) * 0.3
    targets = torch.randint(0, 50, (7,), generator=g)
    return hidden, weight, targets


def test_fp32_hidden_states_with_a_bf16_head_compute_in_bf16():
    hidden, weight, targets = _inputs()
    w16 = weight.bfloat16().requires_grad_(True)
    h = hidden.clone().requires_grad_(True)
    lp, _ = logprobs_from_hidden(h, w16, targets, chunk_rows=3)
    expected = logprobs_from_logits((hidden.bfloat16() @ w16.detach().T)[None].float(), targets[None])[0]
    torch.testing.assert_close(lp, expected, rtol=0, atol=1e-5)
    lp.sum().backward()
    assert h.grad.dtype == torch.float32 and w16.grad.dtype == torch.bfloat16  # each in its own dtype
    assert torch.isfinite(h.grad).all() and h.grad.abs().sum() > 0


def test_under_autocast_an_fp32_head_computes_in_the_autocast_dtype():
    hidden, weight, targets = _inputs(1)
    w = weight.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compute_dtype(hidden, w) == torch.bfloat16
        lp, ent = logprobs_from_hidden(hidden, w, targets, with_entropy=True, chunk_rows=2)
    assert compute_dtype(hidden, w) == torch.float32  # autocast off: the weight's dtype
    bf16_logits = (hidden.bfloat16() @ weight.bfloat16().T)[None].float()
    torch.testing.assert_close(lp, logprobs_from_logits(bf16_logits, targets[None])[0], rtol=0, atol=1e-5)
    fp32 = logprobs_from_logits((hidden @ weight.T)[None], targets[None])[0]
    assert (lp - fp32).abs().max() > 1e-4  # the bf16 rounding shows: the head did not silently run in fp32
    (lp.sum() + ent.sum()).backward()
    assert w.grad.dtype == torch.float32 and torch.isfinite(w.grad).all()
