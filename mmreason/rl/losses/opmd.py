"""The OPMD policy loss: REINFORCE on the current policy's log-probs, no importance ratio, no clip.

Source: "Group-Relative REINFORCE Is Secretly an Off-Policy Algorithm: Demystifying Some Myths About GRPO and
Its Friends" (Yao et al., arXiv 2509.24203), read from the authors' implementation (modelscope/Trinity-RFT
``trinity/algorithm/policy_loss_fn/opmd_policy_loss.py``, the loss of both their ``opmd`` and ``asymre``
algorithms); docs/methods/losses.md#opmd::

    l_it = -A_i logp_theta_it / (1 + tau)          then aggregated over response tokens (default token mean)

The behaviour policy's log-probs are not used: the off-policy correction is carried by the group baseline of
the advantage (``opmd`` / ``asymre`` estimators), not by a ratio. ``1 / (1 + tau)`` is the step size of the
mirror-descent update with regulariser ``tau`` (``tau`` large = small steps). The gradient per token is
``-A_i / (1 + tau)`` times the aggregation's weight; on-policy it equals the unclipped GRPO gradient
divided by ``1 + tau``. Masked positions (padding, even ``-inf``) contribute exactly 0.

Shapes: logprobs, old_logprobs, mask ``[N, T]``; advantages ``[N]`` or ``[N, T]``.
"""

from __future__ import annotations

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.common import finish, prepare, ratio_from_log
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


@register_policy_loss("opmd", defaults={"aggregation": "token_mean"}, provenance="authors' code")
def opmd(x: LossInputs, *, tau: float = 1.0) -> LossOutput:
    """OPMD / AsymRE loss (arXiv 2509.24203): -A logp / (1 + tau), no ratio and no clip.

    The authors add a k2 KL to the reference for OPMD (``x.beta``, ``x.kl_estimator``).

    Args:
        tau: mirror-descent regulariser (> -1; the authors' default 1.0 halves the step).
    """
    if tau <= -1:
        raise ValueError(f"tau must be > -1 (the step is 1 / (1 + tau)), got {tau}")
    p = prepare(x)
    per_token = -p.advantages * p.logprobs / (1.0 + tau)  # [N, T]; masked positions hold logp 0
    return finish(p, per_token, ratio_from_log(p.log_ratio))
