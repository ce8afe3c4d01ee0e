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
from mmreason.rl.losses.cispo import cispo_loss
from mmreason.rl.losses.clipped import clipped_surrogate
from mmreason.rl.losses.cov import clip_cov_loss, kl_cov_loss
from mmreason.rl.losses.dcpo import dcpo_loss
from mmreason.rl.losses.disco import disco_loss
from mmreason.rl.losses.gbpo import gbpo_loss
from mmreason.rl.losses.holder import gmpo_loss, holder_loss
from mmreason.rl.losses.kl import kl_penalty
from mmreason.rl.losses.llds import llds_loss
from mmreason.rl.losses.opmd import opmd_loss
from mmreason.rl.losses.policy import call_loss, policy_loss, tensor_form
from mmreason.rl.losses.reg_grpo import reg_grpo_loss
from mmreason.rl.losses.sapo import sapo_loss

__all__ = [
    "aggregate",
    "aggregation_for_loss_type",
    "call_loss",
    "cispo_loss",
    "clip_cov_loss",
    "clipped_surrogate",
    "dcpo_loss",
    "disco_loss",
    "gbpo_loss",
    "gmpo_loss",
    "holder_loss",
    "kl_cov_loss",
    "kl_penalty",
    "llds_loss",
    "opmd_loss",
    "policy_loss",
    "reg_grpo_loss",
    "sapo_loss",
    "tensor_form",
]
