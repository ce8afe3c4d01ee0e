"""RL math: pure functions on tensors (no model, no I/O, no task code) that every task pack composes.

Shape letters: N trajectories, K reward components, T tokens, G rollouts per prompt, V vocabulary.

Advantages
    ``advantages(name, rewards [N] | [N, K], group_ids [N], *, weights=None, **options) -> AdvantageResult``
    with estimators ``grpo``, ``dr_grpo``, ``rloo``, ``mc_grpo``, ``g2rpo``, ``gdpo``, ``dvao``,
    ``corr_grpo``, ``ga_grpo``, ``step_grpo``, ``dgpo``, ``opmd``, ``asymre``, ``disco``
    (``ESTIMATORS.describe()`` lists them). Register your own with
    ``@register_estimator("name")``; ``evidence_weighted`` re-weights any estimator's output (GA-GRPO);
    ``step_group_ids`` builds Step-GRPO groups.
Losses
    A registered loss is ``fn(x: LossInputs, **options) -> LossOutput``: ``LossInputs`` holds what the trainer has
    for a micro-batch, the options are the loss's keyword-only parameters, and ``register_policy_loss(name,
    reads=..., needs=...)`` declares the extra fields it reads. ``policy_loss(name, logprobs, old_logprobs,
    advantages, mask, **keywords) -> LossOutput`` calls one on plain tensors (the keywords split into the record
    and the options): ``clipped``
    (PPO/GRPO/DAPO/GSPO), ``reg_grpo``, ``opmd`` (OPMD / AsymRE), ``disco``, ``holder`` (HölderPO), ``gbpo``,
    ``dcpo``, ``llds`` (the likelihood-displacement guard) and the rest of ``POLICY_LOSSES``; aggregations
    ``seq_mean_token_mean``, ``token_mean``, ``seq_mean_token_sum_norm``, ``seq_mean_token_sum``
    (``aggregation_for_loss_type`` maps TRL's names); KL estimators ``k1``, ``k2``, ``k3`` (= ``low_var_kl``).
Shaping and helpers
    ``length_trapezoid``, ``overlong_penalty``, ``entropy_band_penalty``, ``dynamic_sampling_filter``,
    ``logprobs_from_logits``, ``entropy_from_logits``.
"""

from mmreason.rl.advantages import advantages
from mmreason.rl.estimators import evidence_weighted
from mmreason.rl.filtering import dynamic_sampling_filter
from mmreason.rl.groups import step_group_ids
from mmreason.rl.logits import entropy_from_logits, logprobs_from_logits
from mmreason.rl.loss_inputs import LossContract, LossInputs, contract_of, options_of
from mmreason.rl.losses import aggregate, aggregation_for_loss_type, call_loss, kl_penalty, policy_loss
from mmreason.rl.records import AdvantageResult, FilterResult, LossMetrics, LossOutput
from mmreason.rl.registries import (
    AGGREGATIONS,
    ESTIMATORS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    loss_contract,
    needs_of,
    register_aggregation,
    register_estimator,
    register_kl_estimator,
    register_policy_loss,
)
from mmreason.rl.shaping import entropy_band_penalty, length_trapezoid, overlong_penalty

__all__ = [
    "AGGREGATIONS",
    "ESTIMATORS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "AdvantageResult",
    "FilterResult",
    "LossContract",
    "LossInputs",
    "LossMetrics",
    "LossOutput",
    "advantages",
    "aggregate",
    "aggregation_for_loss_type",
    "call_loss",
    "contract_of",
    "dynamic_sampling_filter",
    "entropy_band_penalty",
    "entropy_from_logits",
    "evidence_weighted",
    "kl_penalty",
    "length_trapezoid",
    "logprobs_from_logits",
    "loss_contract",
    "options_of",
    "overlong_penalty",
    "policy_loss",
    "register_aggregation",
    "needs_of",
    "register_estimator",
    "register_kl_estimator",
    "register_policy_loss",
    "step_group_ids",
]
