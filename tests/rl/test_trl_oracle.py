"""TRL as an oracle: our clipped loss equals ``GRPOTrainer._compute_loss`` of TRL on the same inputs.

TRL's loss method is run unbound on a stand-in ``self`` that carries just the attributes it reads, and its
model forward is replaced by the log-probs under test; everything between (ratio, clip, KL, aggregation)
is TRL's own code. Gradient accumulation is 1 and there is one process, so TRL's extra divisions are 1.
"""

import types
from collections import defaultdict

import pytest
import torch

from mmreason.rl import aggregation_for_loss_type, policy_loss

trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")

MAX_COMPLETION_LENGTH = 9


def trl_loss(logps, old, adv, mask, loss_type, *, level, beta, ref, eps_lo, eps_hi, delta=None, num_items=None):
    accelerator = types.SimpleNamespace(
        num_processes=1,
        gather=lambda x: x,
        reduce=lambda x, reduction="sum": x,
        gather_for_metrics=lambda x: x,
    )
    trainer = types.SimpleNamespace(
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=delta, steps_per_generation=1),
        loss_type=loss_type,
        epsilon_low=eps_lo,
        epsilon_high=eps_hi,
        use_vllm=False,
        model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        accelerator=accelerator,
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        max_completion_length=MAX_COMPLETION_LENGTH,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logps, torch.zeros_like(logps), None),
    )
    n, t = logps.shape
    inputs = {
        "prompt_ids": torch.zeros(n, 1, dtype=torch.long),
        "prompt_mask": torch.ones(n, 1, dtype=torch.long),
        "completion_ids": torch.zeros(n, t, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum() if num_items is None else torch.tensor(float(num_items)),
    }
    loss = trl_grpo.GRPOTrainer._compute_loss(trainer, None, inputs)
    return loss, trainer._metrics["train"]


def make_inputs(seed, token_advantages=False):
    g = torch.Generator().manual_seed(seed)
    n, t = 6, 7
    logps = -torch.rand(n, t, generator=g) * 3  # log-probs of sampled tokens
    old = logps + torch.randn(n, t, generator=g) * 0.25  # off-policy enough to clip some tokens
    ref = logps + torch.randn(n, t, generator=g) * 0.3
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    mask = (torch.arange(t)[None] < lengths[:, None]).long()
    adv = torch.randn(n, t, generator=g) if token_advantages else torch.randn(n, generator=g)
    return logps, old, adv, mask, ref


def compare(loss_type, level, beta, seed, *, token_advantages=False, delta=None, num_items=None):
    logps, old, adv, mask, ref = make_inputs(seed, token_advantages)
    eps_lo, eps_hi = 0.2, 0.28
    lp_trl = logps.clone().requires_grad_()
    expected, metrics = trl_loss(
        lp_trl,
        old,
        adv,
        mask,
        loss_type,
        level=level,
        beta=beta,
        ref=ref,
        eps_lo=eps_lo,
        eps_hi=eps_hi,
        delta=delta,
        num_items=num_items,
    )
    (expected_grad,) = torch.autograd.grad(expected, lp_trl)
    lp = logps.clone().requires_grad_()
    out = policy_loss(
        "clipped",
        lp,
        old,
        adv,
        mask,
        epsilon=eps_lo,
        epsilon_high=eps_hi,
        delta=delta,
        importance_sampling_level=level,
        aggregation=aggregation_for_loss_type(loss_type),
        max_len=MAX_COMPLETION_LENGTH,
        num_tokens=num_items,
        ref_logprobs=ref,
        beta=beta,
        kl_estimator="k3",
    )
    (grad,) = torch.autograd.grad(out.loss, lp)
    assert abs(out.loss.item() - expected.item()) <= 1e-6
    assert torch.allclose(grad, expected_grad, rtol=0, atol=1e-6)
    if delta is None:  # TRL counts clipped tokens on the delta-capped ratio; we count on the raw ratio
        assert out.metrics.clip_low.item() == pytest.approx(metrics["clip_ratio/low_mean"][-1], abs=1e-6)
        assert out.metrics.clip_high.item() == pytest.approx(metrics["clip_ratio/high_mean"][-1], abs=1e-6)
        assert out.metrics.clip_region.item() == pytest.approx(metrics["clip_ratio/region_mean"][-1], abs=1e-6)
    if beta:
        assert out.metrics.kl.item() == pytest.approx(metrics["kl"][-1], abs=1e-6)
    return out


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo", "luspo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_loss_and_gradient_equal_trl(loss_type, level, beta):
    out = compare(loss_type, level, beta, seed=sum(map(ord, loss_type + level)))
    if level == "token":
        assert out.metrics.clip_region.item() > 0  # the inputs really exercise the clip


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_token_level_advantages_and_dual_clip_equal_trl(loss_type):
    compare(loss_type, "token", 0.0, seed=7, token_advantages=True, delta=1.1)


def test_dapo_global_token_count_equals_trl_num_items_in_batch():
    # TRL's dapo divides by the active tokens of the whole generation batch; pass that count as num_tokens
    compare("dapo", "token", 0.04, seed=11, num_items=80)
