"""Per-token log-probs and entropy from logits, fp32 and chunked."""

import math

import pytest
import torch

from mmreason.rl import entropy_from_logits, logprobs_from_logits


def reference_logprobs(logits, ids, temperature=1.0):
    return torch.log_softmax(logits.double() / temperature, -1).gather(-1, ids[..., None]).squeeze(-1)


@pytest.mark.parametrize("chunk_size", [None, 1, 2, 100])
def test_logprobs_match_log_softmax(chunk_size):
    torch.manual_seed(0)
    logits, ids = torch.randn(3, 5, 11) * 4, torch.randint(0, 11, (3, 5))
    out = logprobs_from_logits(logits, ids, chunk_size=chunk_size, temperature=0.7)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), reference_logprobs(logits, ids, 0.7), atol=1e-5)


def test_bf16_logits_give_fp32_of_the_same_values():
    torch.manual_seed(1)
    logits, ids = (torch.randn(2, 4, 7) * 3).bfloat16(), torch.randint(0, 7, (2, 4))
    out = logprobs_from_logits(logits, ids)
    assert out.dtype == torch.float32
    assert torch.allclose(out.double(), reference_logprobs(logits.float(), ids), atol=1e-5)


def test_logprob_gradient_matches_autograd_of_log_softmax():
    torch.manual_seed(2)
    logits, ids = torch.randn(2, 3, 5, requires_grad=True), torch.randint(0, 5, (2, 3))
    (g1,) = torch.autograd.grad(logprobs_from_logits(logits, ids, chunk_size=1).sum(), logits)
    (g2,) = torch.autograd.grad(torch.log_softmax(logits, -1).gather(-1, ids[..., None]).sum(), logits)
    assert torch.allclose(g1, g2, atol=1e-6)


@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_entropy_known_values(chunk_size):
    v = 6
    uniform = torch.zeros(1, 2, v)
    assert torch.allclose(entropy_from_logits(uniform, chunk_size=chunk_size), torch.full((1, 2), math.log(v)))
    peaked = torch.tensor([[[100.0, 0, 0, 0, 0, 0]]])
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)


def test_entropy_matches_distribution_and_handles_masked_vocab():
    torch.manual_seed(3)
    logits = torch.randn(2, 3, 8)
    logits[..., -2:] = float("-inf")
    out = entropy_from_logits(logits)
    p = torch.softmax(logits[..., :-2].double(), -1)
    assert torch.allclose(out.double(), -(p * p.log()).sum(-1), atol=1e-5)
    assert torch.isfinite(out).all()
