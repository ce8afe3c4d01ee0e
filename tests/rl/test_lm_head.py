"""Log-probs and entropies from hidden states chunk by chunk equal those of the full logits, values and
gradients, and no [M, V] tensor is kept for backward."""

import pytest
import torch

from mmreason.rl import entropy_from_logits, logprobs_from_logits
from mmreason.rl.lm_head import logprobs_from_hidden

M, D, V = 7, 6, 23
SUPPRESSED = (3, 17)


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(M, D, generator=g) * 2).requires_grad_(True)
    weight = torch.randn(V, D, generator=g).requires_grad_(True)
    bias = torch.randn(V, generator=g).requires_grad_(True)
    targets = torch.randint(0, V, (M,), generator=g)
    targets[targets == 3] = 4  # trained tokens are never suppressed ones
    return hidden, weight, bias, targets


def _full(hidden, weight, bias, targets, temperature):
    """The current path: the whole [M, V] logits, suppressed at -inf, then rl.logits."""
    logits = torch.nn.functional.linear(hidden, weight, bias)
    logits = logits.index_fill(-1, torch.tensor(SUPPRESSED), float("-inf"))[None]
    return (
        logprobs_from_logits(logits, targets[None], temperature=temperature)[0],
        entropy_from_logits(logits, temperature=temperature)[0],
    )


@pytest.mark.parametrize("chunk_rows", [1, 3, 100])
def test_chunked_values_and_gradients_equal_the_full_logits_path(chunk_rows):
    hidden, weight, bias, targets = _inputs()
    coef = torch.linspace(-1, 2, M)  # a loss that weighs the tokens differently: gradients of every row count
    lp_want, ent_want = _full(hidden, weight, bias, targets, 0.7)
    want = torch.autograd.grad((coef * lp_want).sum() + (coef.flip(0) * ent_want).sum(), (hidden, weight, bias))
    lp, ent = logprobs_from_hidden(
        hidden,
        weight,
        targets,
        bias=bias,
        temperature=0.7,
        suppressed=SUPPRESSED,
        with_entropy=True,
        chunk_rows=chunk_rows,
    )
    assert lp.dtype == ent.dtype == torch.float32
    torch.testing.assert_close(lp, lp_want, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(ent, ent_want, atol=1e-5, rtol=1e-6)
    got = torch.autograd.grad((coef * lp).sum() + (coef.flip(0) * ent).sum(), (hidden, weight, bias))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_no_vocabulary_sized_tensor_is_kept_for_backward():
    hidden, weight, bias, targets = _inputs(1)
    saved = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp, ent = logprobs_from_hidden(hidden, weight, targets, bias=bias, with_entropy=True, chunk_rows=2)
    assert saved, "the chunks keep their inputs for the recompute"
    assert not [s for s in saved if len(s) == 2 and s[1] == V], saved  # no [rows, V] logits / probabilities
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        saved.clear()
        _full(hidden, weight, bias, targets, 1.0)
    assert [s for s in saved if s[-1] == V]  # the full path does keep them: the check can fail


def test_bf16_weights_give_fp32_log_probs_of_the_bf16_logits():
    hidden, weight, bias, targets = _inputs(2)
    h, w = hidden.detach().bfloat16(), weight.detach().bfloat16()
    lp, _ = logprobs_from_hidden(h, w, targets, chunk_rows=4)
    want = torch.log_softmax((h @ w.T).float().double(), -1).gather(-1, targets[:, None]).squeeze(-1)
    assert lp.dtype == torch.float32
    torch.testing.assert_close(lp.double(), want, atol=1e-5, rtol=0)
