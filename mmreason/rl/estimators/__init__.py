"""Advantage estimators, one small file each; importing this package registers them all."""

from mmreason.rl.estimators import (  # noqa: F401  (imported for their registrations)
    asymre,
    corr_grpo,
    dgpo,
    disco,
    dr_grpo,
    dvao,
    g2rpo,
    ga_grpo,
    gdpo,
    grpo,
    mc_grpo,
    opmd,
    planpo,
    reinforce_pp,
    rloo,
    step_grpo,
)
from mmreason.rl.estimators.ga_grpo import evidence_weighted

__all__ = ["evidence_weighted"]
