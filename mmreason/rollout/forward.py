"""Trajectories -> one padded model batch -> per-token log-probs (and entropies), in fp32.

Right padding with an attention mask; every sample's visual tensors are concatenated in batch order,
which is the order the model consumes them in. Log-probs are aligned with tokens: ``logprobs[:, t]`` is
log p(token_t | tokens_<t) under the sampling distribution (temperature, suppressed tokens), computed for
trained tokens only (``action_mask``; 0 elsewhere): the LM head runs on those positions alone. The math is
``mmreason.rl.logprobs_from_logits`` / ``entropy_from_logits``; docs/methods/trainer.md#log-probs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from mmreason.models.loading import reset_position_state
from mmreason.rollout.head import (  # noqa: F401
    # the head's helpers, also read here by their old names
    chunkable_head,
    head_logprobs,
    lm_head_rows,
    sampling_logits,
)
from mmreason.rollout.packing import packed_logprobs
from mmreason.rollout.prompts import VISUAL_KEYS
from mmreason.rollout.sharded_head import head_pass
from mmreason.types import Trajectory


@dataclass
class ModelBatch:
    input_ids: torch.Tensor  # [N, T]
    attention_mask: torch.Tensor  # [N, T]
    mm_token_type_ids: torch.Tensor  # [N, T]
    action_mask: torch.Tensor  # [N, T] float
    visual_parts: list[dict[str, torch.Tensor]] = field(default_factory=list)  # every trajectory's, in order
    device: torch.device | str | None = None
    _visual: dict[str, torch.Tensor] | None = field(default=None, repr=False)
    # what the model's forward runs: these rows, then vision stand-ins (``with_stand_ins``); None: these rows
    forward_batch: ModelBatch | None = field(default=None, repr=False)

    @property
    def visual(self) -> dict[str, torch.Tensor]:
        """Return the visual tensors of every row concatenated in batch order (on ``device``), built on first use: a
        padded forward needs them, the shared-prefix update never does (it reads each group's tensors once), and for a
        long document G copies of its pixels are the largest tensors of the update."""
        if self._visual is None:
            chunks: dict[str, list[torch.Tensor]] = {}
            for visual in self.visual_parts:
                for key in VISUAL_KEYS:
                    if key in visual:
                        chunks.setdefault(key, []).append(visual[key])
            self._visual = {k: torch.cat(v, dim=0).to(self.device or v[0].device) for k, v in chunks.items()}
        return self._visual

    def to(self, device: torch.device | str) -> ModelBatch:
        built = None if self._visual is None else {k: v.to(device) for k, v in self._visual.items()}
        return ModelBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.mm_token_type_ids.to(device),
            self.action_mask.to(device),
            self.visual_parts,
            device,
            built,
            None if self.forward_batch is None else self.forward_batch.to(device),
        )

    def with_stand_ins(self, rows: list[Trajectory], pad_token_id: int) -> ModelBatch:
        """Return this batch with ``rows`` (``rollout.stand_ins``) appended for the forward only: log-probs, masks and
        every caller still see this batch's rows; the stand-ins' one trained token each enters the log-probs with weight
        0 (``token_logprobs``), so their vision inputs run forward and backward and change nothing."""
        if not rows:
            return self
        extra = collate(rows, pad_token_id)
        width = max(self.input_ids.shape[1], extra.input_ids.shape[1])

        def join(a: torch.Tensor, b: torch.Tensor, value: float) -> torch.Tensor:
            a = torch.nn.functional.pad(a, (0, width - a.shape[1]), value=value)
            b = torch.nn.functional.pad(b, (0, width - b.shape[1]), value=value)
            return torch.cat([a, b.to(a.device)])

        joined = ModelBatch(
            join(self.input_ids, extra.input_ids, pad_token_id),
            join(self.attention_mask, extra.attention_mask, 0),
            join(self.mm_token_type_ids, extra.mm_token_type_ids, 0),
            join(self.action_mask, extra.action_mask, 0.0),
            [*self.visual_parts, *extra.visual_parts],
            self.device,
        )
        return ModelBatch(
            self.input_ids,
            self.attention_mask,
            self.mm_token_type_ids,
            self.action_mask,
            self.visual_parts,
            self.device,
            self._visual,
            joined,
        )

    def model_kwargs(self) -> dict[str, torch.Tensor]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "mm_token_type_ids": self.mm_token_type_ids,
            **self.visual,
        }


def pad_stack(rows: list[torch.Tensor], value: float, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Stack [T_i] tensors into [N, max T_i], right-padded with ``value``."""
    length = max(int(r.numel()) for r in rows)
    out = torch.full((len(rows), length), value, dtype=dtype or rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r
    return out


def collate(trajectories: list[Trajectory], pad_token_id: int) -> ModelBatch:
    ids = pad_stack([t.token_ids for t in trajectories], pad_token_id, torch.long)
    attention = pad_stack([torch.ones_like(t.token_ids) for t in trajectories], 0, torch.long)
    types = pad_stack(
        [
            t.mm_token_type_ids if t.mm_token_type_ids is not None else torch.zeros_like(t.token_ids)
            for t in trajectories
        ],
        0,
        torch.long,
    )
    action = pad_stack([t.action_mask.float() for t in trajectories], 0.0, torch.float32)
    return ModelBatch(ids, attention, types, action, [v for t in trajectories for v in t.visual])


def token_logprobs(
    model: torch.nn.Module,
    batch: ModelBatch,
    with_entropy: bool = False,
    *,
    temperature: float = 1.0,
    suppressed: Sequence[int] = (),
    chunked: bool = True,
    entropy_grad: bool = False,
    packed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute per-token log-probs [N, T] aligned with ``batch.input_ids``, optional entropy; 0 wherever ``action_mask``
    is 0 (prompt, observations, padding). The LM head sees only the hidden states that predict a trained token
    (``lm_head_rows``): no prompt logits, none for padding, so a long document prompt never materialises its [P, V]
    logits.

    ``temperature`` and ``suppressed`` must be the sampler's (``rollout.temperature``, the suppressed vision
    specials), so log-probs are those of the distribution the completions were drawn from (as TRL and verl
    divide by the temperature); a trained token that is suppressed gets log-prob 0. ``chunked`` (where the
    head allows it, ``chunkable_head``; an FSDP2-sharded head computes them in its forward,
    ``rollout.sharded_head``): no [M, V] logits are kept for backward (``rl.lm_head``). The entropy
    carries no autograd graph unless ``entropy_grad`` (a loss that differentiates it, the entropy band).
    ``packed``: the rows run packed into one, without padding (``rollout.packing``; the caller checks
    ``packing.applies``).
    """
    if batch.forward_batch is not None:
        return _with_stand_ins(
            model,
            batch,
            with_entropy,
            packed=packed,
            entropy_grad=entropy_grad,
            temperature=temperature,
            suppressed=suppressed,
            chunked=chunked,
        )
    if packed:
        return packed_logprobs(
            model,
            batch,
            with_entropy,
            entropy_grad=entropy_grad,
            temperature=temperature,
            suppressed=suppressed,
            chunked=chunked,
        )
    reset_position_state(model)  # state left by generate(); positions must be recomputed
    n, t = batch.input_ids.shape
    first = first_action_position(batch.action_mask)  # the transformer's last layer runs from here on only
    trained = batch.action_mask[:, first:].bool()  # [N, T - first]: the tokens that get a log-prob
    # hidden state first - 1 + j predicts token first + j; the last position predicts nothing
    rows = torch.nn.functional.pad(trained, (0, 1))
    targets = batch.input_ids[:, first:][trained]  # [M]
    with head_pass(
        model,
        rows,
        targets,
        chunked=chunked,
        with_entropy=with_entropy,
        temperature=temperature,
        suppressed=suppressed,
        entropy_grad=entropy_grad,
    ) as read:
        out = model(**batch.model_kwargs(), use_cache=False, logits_to_keep=t - first + 1)
    lp, ent = read(out.logits)
    where = torch.nn.functional.pad(trained, (first, 0))  # [N, T]
    logprobs = lp.new_zeros(n, t).masked_scatter(where, lp)
    entropy = None if ent is None else ent.new_zeros(n, t).masked_scatter(where, ent)
    return logprobs, entropy


def _with_stand_ins(
    model: torch.nn.Module, batch: ModelBatch, with_entropy: bool, **options: Any
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute ``token_logprobs`` of ``batch``'s rows from a forward over ``batch.forward_batch`` (these rows, then the
    vision stand-ins). The stand-ins' log-probs are added times 0 to every returned log-prob: the values are unchanged,
    and the backward reaches their vision inputs on every process (a zero gradient)."""
    assert batch.forward_batch is not None
    n, t = batch.input_ids.shape
    logprobs, entropy = token_logprobs(model, batch.forward_batch, with_entropy, **options)  # [N + S, T']
    tie = torch.nan_to_num(logprobs[n:].sum(), nan=0.0, posinf=0.0, neginf=0.0) * 0.0
    return logprobs[:n, :t] + tie, None if entropy is None else entropy[:n, :t]


def first_action_position(action_mask: torch.Tensor) -> int:
    """Return the earliest trained position of any row (>= 1: token 0 has no prediction); T - 1 when none is."""
    rows = action_mask.bool().any(dim=1)
    if not rows.any():
        return max(action_mask.shape[1] - 1, 1)
    first = int(action_mask.bool().float().argmax(dim=1)[rows].min())
    return max(first, 1)
