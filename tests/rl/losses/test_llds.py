"""LLDS (arXiv 2512.04220, Eq. 5): the likelihood-preserving term added to the clipped surrogate
(docs/methods/losses.md#llds), worked by hand.

Three rows, old log-probs 0, mask [[1,1,1],[1,1,0],[1,1,1]] (8 trained tokens), A = [+1, -1, 0]:
  row 0: new = [-0.5, 0.2, 0.1] -> d = old - new = [0.5, -0.2, -0.1], sum 0.2 > 0: gate open,
         penalty sum max(0, d) = 0.5;
  row 1: A < 0, not in Y_pre: no penalty whatever its displacement;
  row 2: A = 0 is in Y_pre; new = [-0.1, 0.3, 0.0] -> d = [0.1, -0.3, 0], sum -0.2: gate closed.
  L_LLDS = 0.5 / 8 = 0.0625; dL/dlogp = -1/8 at (0, 0), 0 elsewhere.
Action gate, one row, mask [1, 1, 0, 1] (two actions around a tool observation), old 0,
new = [-0.3, 0.1, 9, 0.4] -> d = [0.3, -0.1, -, -0.4]: response sum -0.2 (closed, L = 0); action 1 sum
0.2 (open, penalty 0.3), action 2 sum -0.4 (closed): L = 0.3 / 3 = 0.1.
"""

import pytest
import torch

from mmreason.rl import policy_loss
from mmreason.rl.losses.llds import action_segments, llds_term

OLD = torch.zeros(3, 3)
NEW = torch.tensor([[-0.5, 0.2, 0.1], [-1.0, -1.0, 0.0], [-0.1, 0.3, 0.0]])
MASK = torch.tensor([[1.0, 1, 1], [1, 1, 0], [1, 1, 1]])
ADV = torch.tensor([1.0, -1.0, 0.0])


def test_worked_example_response_gate():
    lp = NEW.clone().requires_grad_(True)
    term, opened = llds_term(lp, OLD, ADV, MASK)
    assert term.item() == pytest.approx(0.0625, abs=1e-6)
    assert opened.item() == pytest.approx(0.5)  # row 0 of the two Y_pre rows
    (grad,) = torch.autograd.grad(term, lp)
    want = torch.zeros(3, 3)
    want[0, 0] = -1 / 8
    torch.testing.assert_close(grad, want)


def test_loss_is_clipped_plus_coef_times_term():
    lp = NEW.clone().requires_grad_(True)
    out = policy_loss("llds", lp, OLD, ADV, MASK, llds_coef=0.5, aggregation="token_mean")
    base = policy_loss("clipped", lp, OLD, ADV, MASK, aggregation="token_mean")
    assert (out.loss - base.loss).item() == pytest.approx(0.5 * 0.0625, abs=1e-6)
    (g_out,) = torch.autograd.grad(out.loss, lp, retain_graph=True)
    (g_base,) = torch.autograd.grad(base.loss, lp)
    want = torch.zeros(3, 3)
    want[0, 0] = -0.5 / 8
    torch.testing.assert_close(g_out - g_base, want)


def test_action_gate_worked_example():
    mask = torch.tensor([[1.0, 1, 0, 1]])
    new = torch.tensor([[-0.3, 0.1, 9.0, 0.4]])
    old = torch.zeros(1, 4)
    assert action_segments(mask).tolist() == [[1, 2 - 1, 0, 2]]
    assert llds_term(new, old, torch.tensor([1.0]), mask, "response")[0].item() == pytest.approx(0.0)
    assert llds_term(new, old, torch.tensor([1.0]), mask, "action")[0].item() == pytest.approx(0.1, abs=1e-6)


def test_on_policy_closes_every_gate_and_equal_rewards_guard_every_row():
    lp = NEW.clone().requires_grad_(True)
    # on-policy: every displacement is 0, every gate closed
    assert llds_term(lp, lp.detach(), ADV, MASK)[0].item() == 0.0
    # all rewards equal -> A = 0 for every row: all are in Y_pre; row 1 (d = [1, 1], sum 2) now opens too:
    # (0.5 + 2) / 8 = 0.3125, gates open in 2 of 3 rows
    term, opened = llds_term(lp, OLD, torch.zeros(3), MASK)
    assert term.item() == pytest.approx(2.5 / 8, abs=1e-6) and opened.item() == pytest.approx(2 / 3)


def test_one_sample_masked_tokens_and_padding():
    # one sample; the masked position holds -inf padding and stays out of the term and its gradient
    lp = torch.tensor([[-0.2, float("-inf")]]).requires_grad_(True)
    term, _ = llds_term(lp, torch.zeros(1, 2), torch.tensor([0.0]), torch.tensor([[1.0, 0.0]]))
    assert term.item() == pytest.approx(0.2, abs=1e-6)
    (grad,) = torch.autograd.grad(term, lp)
    assert torch.isfinite(grad).all() and grad[0, 1] == 0
    # everything masked: 0, not NaN
    assert llds_term(torch.zeros(2, 2), torch.ones(2, 2), torch.ones(2), torch.zeros(2, 2))[0].item() == 0.0


def test_options_are_checked():
    with pytest.raises(ValueError, match="gate"):
        llds_term(NEW, OLD, ADV, MASK, gate="turn")
    with pytest.raises(ValueError, match="llds_coef"):
        policy_loss("llds", NEW, OLD, ADV, MASK, llds_coef=-1.0)
