"""The LM head weight's gradient sums over chunks in fp32 (issue 48): with a bf16 head and many chunks it is as
close to the fp32 gradient as with one chunk. Before, autograd summed the chunks' bf16 gradients in bf16, one
rounding of the running sum per chunk (~150 chunks per 16k tokens at a 151k vocabulary)."""

from __future__ import annotations

import torch

from mmreason.rl.lm_head import HIDDEN_CHUNK_ELEMENTS, chunk_rows_for, logprobs_from_hidden


def _inputs(m=512, d=32, v=256):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(m, d, generator=g)
    weight = torch.randn(v, d, generator=g) * 0.3
    targets = torch.randint(0, v, (m,), generator=g)
    return hidden, weight, targets


def _weight_grad(hidden, weight, targets, chunk_rows, **kwargs):
    w = weight.clone().requires_grad_(True)
    lp, ent = logprobs_from_hidden(hidden, w, targets, with_entropy=True, chunk_rows=chunk_rows, **kwargs)
    (lp.sum() + 0.1 * ent.sum()).backward()
    return w.grad


def _error(grad, reference):
    return float((grad.float() - reference).norm() / reference.norm())


def test_bf16_head_gradient_over_many_chunks_is_as_close_as_one_chunk():
    hidden, weight, targets = _inputs()
    reference = _weight_grad(hidden.double(), weight.double(), targets, 512).float()
    one = _error(_weight_grad(hidden.bfloat16(), weight.bfloat16(), targets, 512), reference)
    many = _error(_weight_grad(hidden.bfloat16(), weight.bfloat16(), targets, 2), reference)  # 256 chunks
    assert one < 1e-2
    assert many < 1.5 * one, (many, one)


def test_under_autocast_an_fp32_head_gets_its_gradient_summed_in_fp32():
    hidden, weight, targets = _inputs()
    reference = _weight_grad(hidden.double(), weight.double(), targets, 512).float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        one = _weight_grad(hidden, weight, targets, 512)
        many = _weight_grad(hidden, weight, targets, 2)
    assert many.dtype == torch.float32
    assert _error(many, reference) < 1.5 * _error(one, reference)


def test_chunk_rows_on_a_cpu_keep_the_cpu_budget():
    assert chunk_rows_for(torch.zeros(1, 4), 151_936) == HIDDEN_CHUNK_ELEMENTS // 151_936 == 110
    assert chunk_rows_for(torch.zeros(1, 4), 10) == HIDDEN_CHUNK_ELEMENTS // 10
