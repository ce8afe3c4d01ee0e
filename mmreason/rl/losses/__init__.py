"""Policy losses, token aggregations and KL estimators; importing this package registers them all."""

from mmreason.rl.losses import (  # noqa: F401,E501  (registrations)
    aggregation,
    cispo,
    clipped,
    conspo,
    cov,
    dagrpo,
    dcpo,
    dhpo,
    disco,
    erpo,
    etr,
    gbpo,
    gepo,
    holder,
    kl,
    llds,
    opmd,
    r3_rank,
    reg_grpo,
    sapo,
    vps,
)
from mmreason.rl.losses.aggregation import aggregate, aggregation_for_loss_type
from mmreason.rl.losses.kl import kl_penalty
from mmreason.rl.losses.policy import call_loss, policy_loss

__all__ = ["aggregate", "aggregation_for_loss_type", "call_loss", "kl_penalty", "policy_loss"]
