"""The contract between the trainer and a policy loss: one ``LossInputs`` record per micro-batch, and what a loss
declares about it (``LossContract``).

A policy loss is ``fn(x: LossInputs, **options) -> LossOutput``: ``x`` holds everything the trainer has for the
micro-batch (tensors, and the shared settings: ``beta``, the clip range ``epsilon`` ...), ``options`` are the
loss's own keyword-only parameters (``epsilon_max``, ``tau`` ...), set from ``algorithm.loss_options``. A loss that
reads one of the extra fields (``epsilon``, ``entropy``, ``rewards`` ...) says so in its contract: a top-level key
such as ``algorithm.epsilon_high`` set for a loss that does not read it stops the run at start-up, the trainer
computes the costly extras only for the losses that read them, and a direct caller is told which one it forgot.

Shape letters: N trajectories, T tokens, M rows of the whole step, H past group entropies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from torch import Tensor

from mmreason.rl.options import keyword_options

ImportanceSamplingLevel = Literal["token", "sequence"]


@dataclass(frozen=True)
class LossInputs:
    """What the trainer has for one micro-batch; built once and read by the loss.

    The four tensors and the shared settings reach every loss; the extras after ``num_tokens`` are set by the
    trainer and read only by the losses that declare them (``LossContract.reads``).
    """

    logprobs: Tensor  # [N, T] current policy, with gradient
    old_logprobs: Tensor  # [N, T] behaviour policy (the policy that sampled; logprobs.detach() on-policy)
    advantages: Tensor  # [N] one per trajectory (broadcast to its tokens) or [N, T]
    mask: Tensor  # [N, T] 1 on trained response tokens
    seq_mask: Tensor | None = None  # [N] bool; False rows leave the loss and its normalisation (MC-GRPO pivot)
    group_ids: Tensor | None = None  # [N] rollouts of one prompt share an id
    ref_logprobs: Tensor | None = None  # [N, T] frozen reference; with beta > 0 adds beta * KL
    beta: float = 0.0  # weight of the KL to the reference (algorithm.beta)
    kl_estimator: str = "k3"  # a registered KL estimator (algorithm.kl_estimator)
    aggregation: str = "seq_mean_token_mean"  # a registered token aggregation (from algorithm.loss_type)
    max_len: int | None = None  # L_max of seq_mean_token_sum_norm (rollout.max_completion_length)
    num_tokens: float | Tensor | None = None  # token_mean denominator (the optimizer step's response tokens)
    # ---- extras: read only by the losses that declare them
    epsilon: float = 0.2  # PPO clip range 1 - epsilon (algorithm.epsilon)
    epsilon_high: float | None = None  # upper clip 1 + epsilon_high, default epsilon (DAPO clip-higher)
    importance_sampling_level: ImportanceSamplingLevel = "token"  # token ratios, or GSPO's sequence ratio
    train_step: int = 0  # finished training steps (annealed options: HölderPO, ConSPO, Clip-Cov)
    rewards: Tensor | None = None  # [N] the rows' total rewards
    step_rewards: Tensor | None = None  # [M] total rewards of every row of the step
    prev_entropy: float | None = None  # mean token entropy of the previous step's update
    entropy: Tensor | None = None  # [N, T] token entropies of the current policy, detached
    entropy_history: Tensor | None = None  # [H] the last group entropies of earlier steps
    tempered_logprobs: Tensor | None = None  # [N, T] behaviour log-probs at the loss's temperature (DCPO)
    token_ids: Tensor | None = None  # [N, T] the micro-batch's token ids
    segment_progress: Tensor | None = None  # [N, T] GRPO-VPS segment progress of each token

    def on_device(self) -> LossInputs:
        """The record with every tensor on ``logprobs``' device. The trainer builds the group ids, rewards and
        entropy history on the CPU beside log-probs on the GPU; moving them here, once, before any loss runs,
        keeps every loss free of device bookkeeping (``tests/rl/losses/test_loss_device.py``)."""
        device = self.logprobs.device
        moved: dict[str, Any] = {
            f.name: value.to(device)
            for f in fields(self)
            if isinstance(value := getattr(self, f.name), Tensor) and value.device != device
        }
        return replace(self, **moved) if moved else self


TENSORS = ("logprobs", "old_logprobs", "advantages", "mask")
FIELDS = tuple(f.name for f in fields(LossInputs))
COMMON = FIELDS[len(TENSORS) : FIELDS.index("num_tokens") + 1]  # every loss gets these
EXTRAS = FIELDS[len(COMMON) + len(TENSORS) :]


@dataclass(frozen=True)
class LossContract:
    """What a policy loss declares about its inputs.

    ``reads``: the extras it reads (the trainer computes ``tempered_logprobs``, ``segment_progress`` and
    ``entropy_history`` only for a loss that reads them). ``needs``: fields it cannot do without (a direct
    caller must pass them). ``defaults``: its own defaults of fields, for a direct caller that sets none (the
    trainer always sets them from the config: ``aggregation`` from ``algorithm.loss_type``).
    """

    reads: tuple[str, ...] = ()
    needs: tuple[str, ...] = ()
    defaults: Mapping[str, Any] = field(default_factory=dict)
    takes: tuple[str, ...] = field(init=False)  # the fields it takes by keyword: COMMON, then its extras

    def __post_init__(self) -> None:
        extra = [k for k in EXTRAS if k in self.reads or k in self.needs]
        object.__setattr__(self, "takes", (*COMMON, *extra))
        unknown = [k for k in (*self.reads, *self.needs, *self.defaults) if k not in self.takes]
        if unknown:
            raise ValueError(f"a loss reads, needs and sets defaults of LossInputs fields {FIELDS[4:]}; not {unknown}")


def contract_of(fn: Callable[..., Any]) -> LossContract:
    """The contract a loss declared (``register_policy_loss`` / ``loss_contract``), or the default one."""
    return getattr(fn, "loss_contract", None) or LossContract()


def options_of(fn: Callable[..., Any]) -> list[str]:
    """A loss's options: its keyword-only parameters that are not LossInputs fields."""
    return keyword_options(fn, exclude=FIELDS)


def missing_needs(fn: Callable[..., Any], x: LossInputs) -> list[str]:
    """The fields ``fn`` needs that ``x`` leaves unset."""
    return [k for k in contract_of(fn).needs if getattr(x, k) is None]
