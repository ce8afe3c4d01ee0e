"""DCPO (Distribution-Centric Policy Optimization): GRPO's clipped loss on advantages mixed with a
temperature-shifted likelihood ratio of the successful rollouts, steered by the last step's entropy.

Source: "Distribution-Centric Policy Optimization Dominates Exploration-Exploitation Trade-off" (Li et al.,
arXiv 2601.12730), read from the authors' code ``597358816/DCPO``, ``verl/trainer/ray_trainer.py``: ``RayPPOTrainer.fit`` branch
``alg == "DCPO"`` and ``_compute_bool_reward_by_score``; defaults from ``verl/trainer/config.py``
(``entropy_base = 0.5``); docs/methods/losses.md#dcpo. The authors' code is the specification.

    H            mean token entropy of the previous step's update (0 before the first step, as in the code)
    T'           = temperature_high (1.2) if H <= entropy_base else temperature_low (0.8)
    b_i          = [r_i > reward_threshold]                     r_i the row's total reward, threshold 0.05
    acc          = mean_i b_i                                   over the whole step's rows
    a            = min(|entropy_base - H|, alpha_cap) / acc     alpha_cap = 0.1
    alpha        = a / (a + 1)
    f_it         = pi_old^{T'}(y_it) / pi_old(y_it) = exp(logp_old^{T'}_it - logp_old_it)     (no gradient)
    A'_it        = (1 - alpha) A_i + alpha b_i f_it             then the clipped surrogate of ``clipped``

Low entropy (H <= base) makes T' > 1, whose distribution is flatter: f > 1 on the successful rollouts' less
likely tokens, which then get more push; high entropy makes T' < 1 and sharpens instead. ``alpha`` grows with
the distance to the entropy target and shrinks as accuracy rises. Shapes: logprobs, old_logprobs,
tempered_logprobs, mask ``[N, T]``; advantages, rewards ``[N]``; step_rewards ``[M]`` (all rows of the step).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from mmreason.rl.loss_inputs import LossInputs
from mmreason.rl.losses.clipped import clipped
from mmreason.rl.providers import PreviousEntropy
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import register_policy_loss


def dcpo_temperature(
    prev_entropy: float, entropy_base: float = 0.5, temperature_high: float = 1.2, temperature_low: float = 0.8
) -> float:
    """T': ``temperature_high`` when the last step's entropy is at or below ``entropy_base``, else ``temperature_low``."""
    return float(temperature_high if prev_entropy <= entropy_base else temperature_low)


def dcpo_alpha(
    prev_entropy: float,
    step_rewards: Tensor,
    entropy_base: float = 0.5,
    reward_threshold: float = 0.05,
    alpha_cap: float = 0.1,
) -> float:
    """alpha = a / (a + 1), a = min(|entropy_base - H|, alpha_cap) / acc; 0 when no row of the step succeeds
    (the authors' code divides by zero there; the mixed-in term is 0 anyway, so A is left as it is)."""
    rewards = torch.as_tensor(step_rewards, dtype=torch.float32)
    finite = rewards[torch.isfinite(rewards)]
    acc = float((finite > reward_threshold).float().mean()) if finite.numel() else 0.0
    if acc == 0.0:
        return 0.0
    a = min(abs(entropy_base - prev_entropy), alpha_cap) / acc
    return a / (a + 1.0)


def dcpo_advantages(
    advantages: Tensor,
    rewards: Tensor,
    old_logprobs: Tensor,
    tempered_logprobs: Tensor,
    mask: Tensor,
    *,
    alpha: float,
    reward_threshold: float = 0.05,
) -> Tensor:
    """A'_it = (1 - alpha) A_i + alpha [r_i > threshold] exp(logp^{T'}_it - logp_it), ``[N, T]``, zero on masked tokens."""
    adv = advantages.float()
    adv = adv[:, None].expand_as(old_logprobs) if adv.dim() == 1 else adv
    success = (torch.nan_to_num(rewards.float(), nan=0.0) > reward_threshold).float()[:, None]  # [N, 1]
    on = mask > 0
    log_f = torch.where(on, tempered_logprobs.float() - old_logprobs.float(), 0.0)  # -inf padding stays out
    factor = torch.exp(torch.nan_to_num(log_f, nan=0.0).clamp(-20.0, 20.0))
    return torch.where(on, (1.0 - alpha) * adv + alpha * success * factor, 0.0).detach()


@register_policy_loss(
    "dcpo",
    provenance="authors' code",
    reads=("epsilon", "epsilon_high"),
    needs=("tempered_logprobs", "rewards", "step_rewards", "prev_entropy"),
)
def dcpo(
    x: LossInputs,
    *,
    entropy_base: float = 0.5,
    reward_threshold: float = 0.05,
    alpha_cap: float = 0.1,
    # T' of the trainer's tempered forward (``dcpo_temperature``), not read by the loss itself:
    temperature_high: float = 1.2,
    temperature_low: float = 0.8,
) -> LossOutput:
    """DCPO (arXiv 2601.12730): clipped surrogate on (1 - alpha) A + alpha [r > 0.05] pi_old^{T'} / pi_old.

    Reads ``x.tempered_logprobs`` ``[N, T]`` (behaviour-policy log-probs with logits divided by
    ``dcpo_temperature(prev_entropy, ...)``, computed by the trainer without gradient), ``x.rewards`` ``[N]``,
    ``x.step_rewards`` ``[M]`` (every row of the step, for acc) and ``x.prev_entropy``; the clip as in ``clipped``
    (``x.epsilon`` / ``x.epsilon_high``, token-level ratios).

    Args:
        entropy_base, reward_threshold, alpha_cap: see the module docstring.
        temperature_high, temperature_low: only used by the trainer to choose T' (``dcpo_temperature``).
    """
    assert x.tempered_logprobs is not None and x.rewards is not None and x.step_rewards is not None
    assert x.prev_entropy is not None  # LossContract.needs: the callers check
    alpha = dcpo_alpha(x.prev_entropy, x.step_rewards, entropy_base, reward_threshold, alpha_cap)
    shaped = dcpo_advantages(
        x.advantages,
        x.rewards.to(x.logprobs.device),
        x.old_logprobs,
        x.tempered_logprobs,
        x.mask,
        alpha=alpha,
        reward_threshold=reward_threshold,
    )
    return clipped(replace(x, advantages=shaped, importance_sampling_level="token"))


class DCPOInputs(PreviousEntropy):
    """The trainer side of DCPO: the last update's mean token entropy H (kept across steps, in checkpoints) and,
    before each update, the behaviour policy's log-probs at the temperature T' = ``dcpo_temperature(H)``."""

    provides: ClassVar[tuple[str, ...]] = ("prev_entropy", "tempered_logprobs")
    TEMPERATURE_OPTIONS = ("entropy_base", "temperature_high", "temperature_low")

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.tempered: list[Tensor] = []

    def before_update(self, view: Any) -> dict[str, float]:
        picked = {k: v for k, v in self.options.items() if k in self.TEMPERATURE_OPTIONS}
        t = dcpo_temperature(self.prev_entropy, **picked)
        self.tempered = [view.logprobs(k, temperature=t) for k in range(view.count)]
        return {"update/tempered_temperature": t}

    def inputs(self, k: int) -> dict[str, Any]:
        return {**super().inputs(k), "tempered_logprobs": self.tempered[k]}

    def after_update(self, entropy: float | None) -> None:
        super().after_update(entropy)
        self.tempered = []
