"""Trajectories -> one padded model batch -> per-token log-probs (and entropies), in fp32.

Right padding with an attention mask; every sample's visual tensors are concatenated in batch order,
which is the order the model consumes them in. Log-probs are aligned with tokens: ``logprobs[:, t]`` is
log p(token_t | tokens_<t) under the sampling distribution (temperature, suppressed tokens), computed from
the batch's first trained position on (0 before it and on padding). The math is ``mmreason.rl.logprobs_from_logits`` / ``entropy_from_logits``; docs/algorithms.md §9.1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mmreason.models.loading import reset_position_state
from mmreason.rl.logits import entropy_from_logits, logprobs_from_logits
from mmreason.rollout.prompts import VISUAL_KEYS
from mmreason.types import Trajectory


@dataclass
class ModelBatch:
    input_ids: torch.Tensor  # [N, T]
    attention_mask: torch.Tensor  # [N, T]
    mm_token_type_ids: torch.Tensor  # [N, T]
    action_mask: torch.Tensor  # [N, T] float
    visual: dict[str, torch.Tensor]

    def to(self, device) -> ModelBatch:
        return ModelBatch(self.input_ids.to(device), self.attention_mask.to(device),
                          self.mm_token_type_ids.to(device), self.action_mask.to(device),
                          {k: v.to(device) for k, v in self.visual.items()})

    def model_kwargs(self) -> dict[str, torch.Tensor]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask,
                "mm_token_type_ids": self.mm_token_type_ids, **self.visual}


def pad_stack(rows: list[torch.Tensor], value: float, dtype: torch.dtype | None = None) -> torch.Tensor:
    """[T_i] tensors -> [N, max T_i], right-padded with ``value``."""
    length = max(int(r.numel()) for r in rows)
    out = torch.full((len(rows), length), value, dtype=dtype or rows[0].dtype)
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r
    return out


def collate(trajectories: list[Trajectory], pad_token_id: int) -> ModelBatch:
    ids = pad_stack([t.token_ids for t in trajectories], pad_token_id, torch.long)
    attention = pad_stack([torch.ones_like(t.token_ids) for t in trajectories], 0, torch.long)
    types = pad_stack([t.mm_token_type_ids if t.mm_token_type_ids is not None else torch.zeros_like(t.token_ids)
                       for t in trajectories], 0, torch.long)
    action = pad_stack([t.action_mask.float() for t in trajectories], 0.0, torch.float32)
    chunks: dict[str, list[torch.Tensor]] = {}
    for traj in trajectories:
        for visual in traj.visual:
            for key in VISUAL_KEYS:
                if key in visual:
                    chunks.setdefault(key, []).append(visual[key])
    visual = {k: torch.cat(v, dim=0) for k, v in chunks.items()}
    return ModelBatch(ids, attention, types, action, visual)


def sampling_logits(logits: torch.Tensor, temperature: float = 1.0,
                    suppressed: Sequence[int] = ()) -> torch.Tensor:
    """The logits of the distribution rollouts are drawn from: suppressed tokens (vision specials, never
    sampled) at -inf. Dividing by the temperature happens in the log-prob and entropy functions."""
    if not suppressed:
        return logits
    index = torch.as_tensor(list(suppressed), device=logits.device)
    return logits.index_fill(-1, index, float("-inf"))


def token_logprobs(model, batch: ModelBatch, with_entropy: bool = False, *, temperature: float = 1.0,
                   suppressed: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs [N, T] aligned with ``batch.input_ids``, optional entropy; 0 on padding and before
    the batch's first trained token (``action_mask``): the LM head runs only from there on
    (``logits_to_keep``), so a long document prompt never materialises its [P, V] logits.

    ``temperature`` and ``suppressed`` must be the sampler's (``rollout.temperature``, the suppressed vision
    specials), so log-probs are those of the distribution the completions were drawn from (as TRL and verl
    divide by the temperature); a prompt token that is suppressed (``<|image_pad|>``) gets log-prob 0.
    """
    reset_position_state(model)  # state left by generate(); positions must be recomputed
    n, t = batch.input_ids.shape
    first = first_action_position(batch.action_mask)  # no logits before it: a long prompt's are never made
    out = model(**batch.model_kwargs(), use_cache=False, logits_to_keep=t - first + 1)
    # logits[:, j] predicts token first + j (the last position predicts nothing)
    logits = sampling_logits(out.logits[:, :-1], temperature, suppressed)  # [N, T - first, V]
    targets = batch.input_ids[:, first:]
    lp = logprobs_from_logits(logits, targets, temperature=temperature)
    if suppressed:
        lp = lp.masked_fill(torch.isin(targets, torch.as_tensor(list(suppressed), device=targets.device)), 0.0)
    head = lp.new_zeros(n, first)  # prompt positions before every row's first action token
    logprobs = torch.cat([head, lp], dim=1) * batch.attention_mask
    entropy = None
    if with_entropy:
        ent = entropy_from_logits(logits, temperature=temperature)  # differentiable: entropy shaping uses it
        entropy = torch.cat([head, ent], dim=1) * batch.attention_mask
    return logprobs, entropy


def first_action_position(action_mask: torch.Tensor) -> int:
    """The earliest trained position of any row (>= 1: token 0 has no prediction); T - 1 when none is."""
    rows = action_mask.bool().any(dim=1)
    if not rows.any():
        return max(action_mask.shape[1] - 1, 1)
    first = int(action_mask.bool().float().argmax(dim=1)[rows].min())
    return max(first, 1)
