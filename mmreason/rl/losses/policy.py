"""``policy_loss(name, ...)``: call a registered policy loss by name, with its options checked first."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from mmreason.rl.options import check_options
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import POLICY_LOSSES


def policy_loss(
    name: str, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, **options: Any
) -> LossOutput:
    """The policy loss registered as ``name`` (``clipped``, ``reg_grpo``, ...) on ``[N, T]`` inputs.

    An option the loss does not take raises ``TypeError`` naming it.
    """
    fn = POLICY_LOSSES.get(name)
    check_options("policy loss", name, fn, options, skip=4)
    return fn(logprobs, old_logprobs, advantages, mask, **options)
