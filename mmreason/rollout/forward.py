"""Trajectories -> one padded model batch -> per-token log-probs (and entropies), in fp32.

Right padding with an attention mask; every sample's visual tensors are concatenated in batch order,
which is the order the model consumes them in. Log-probs are aligned with tokens: ``logprobs[:, t]`` is
log p(token_t | tokens_<t) under the sampling distribution (temperature, suppressed tokens), computed for
trained tokens only (``action_mask``; 0 elsewhere): the LM head runs on those positions alone. The math is ``mmreason.rl.logprobs_from_logits`` / ``entropy_from_logits``; docs/algorithms.md §9.1.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

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
    visual_parts: list[dict[str, torch.Tensor]] = field(default_factory=list)  # every trajectory's, in order
    device: torch.device | str | None = None
    _visual: dict[str, torch.Tensor] | None = field(default=None, repr=False)

    @property
    def visual(self) -> dict[str, torch.Tensor]:
        """The visual tensors of every row concatenated in batch order (on ``device``), built on first use:
        a padded forward needs them, the shared-prefix update never does (it reads each group's tensors
        once), and for a long document G copies of its pixels are the largest tensors of the update."""
        if self._visual is None:
            chunks: dict[str, list[torch.Tensor]] = {}
            for visual in self.visual_parts:
                for key in VISUAL_KEYS:
                    if key in visual:
                        chunks.setdefault(key, []).append(visual[key])
            self._visual = {k: torch.cat(v, dim=0).to(self.device or v[0].device) for k, v in chunks.items()}
        return self._visual

    def to(self, device) -> ModelBatch:
        built = None if self._visual is None else {k: v.to(device) for k, v in self._visual.items()}
        return ModelBatch(self.input_ids.to(device), self.attention_mask.to(device),
                          self.mm_token_type_ids.to(device), self.action_mask.to(device), self.visual_parts,
                          device, built)

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
    return ModelBatch(ids, attention, types, action, [v for t in trajectories for v in t.visual])


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
    """Per-token log-probs [N, T] aligned with ``batch.input_ids``, optional entropy; 0 wherever
    ``action_mask`` is 0 (prompt, observations, padding). The LM head sees only the hidden states that
    predict a trained token (``lm_head_rows``): no prompt logits, none for padding, so a long document
    prompt never materialises its [P, V] logits.

    ``temperature`` and ``suppressed`` must be the sampler's (``rollout.temperature``, the suppressed vision
    specials), so log-probs are those of the distribution the completions were drawn from (as TRL and verl
    divide by the temperature); a trained token that is suppressed gets log-prob 0.
    """
    reset_position_state(model)  # state left by generate(); positions must be recomputed
    n, t = batch.input_ids.shape
    first = first_action_position(batch.action_mask)  # the transformer's last layer runs from here on only
    trained = batch.action_mask[:, first:].bool()  # [N, T - first]: the tokens that get a log-prob
    # hidden state first - 1 + j predicts token first + j; the last position predicts nothing
    rows = torch.nn.functional.pad(trained, (0, 1))
    with lm_head_rows(model, rows):
        out = model(**batch.model_kwargs(), use_cache=False, logits_to_keep=t - first + 1)
    logits = sampling_logits(out.logits, temperature, suppressed)  # [1, M, V], M = trained tokens
    targets = batch.input_ids[:, first:][trained][None]  # [1, M]
    lp = logprobs_from_logits(logits, targets, temperature=temperature)[0]
    if suppressed:
        lp = lp.masked_fill(torch.isin(targets[0], torch.as_tensor(list(suppressed), device=lp.device)), 0.0)
    where = torch.nn.functional.pad(trained, (first, 0))  # [N, T]
    logprobs = lp.new_zeros(n, t).masked_scatter(where, lp)
    entropy = None
    if with_entropy:
        ent = entropy_from_logits(logits, temperature=temperature)[0]  # differentiable: entropy shaping uses it
        entropy = ent.new_zeros(n, t).masked_scatter(where, ent)
    return logprobs, entropy


@contextmanager
def lm_head_rows(model, rows: torch.Tensor):
    """Inside the block the model's LM head gets only the hidden states where ``rows`` is true and returns
    their logits as ``[1, M, V]`` (M = ``rows.sum()``). ``rows`` is ``[N, L]`` over the positions whose logits
    the forward keeps (``logits_to_keep = L``). The forward still goes through the model's own ``__call__``
    (DDP / FSDP hooks, LoRA layers); only the head's input is narrowed, by a forward pre-hook."""
    inner = getattr(model, "module", model)  # DDP / accelerate wrappers
    head = inner.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(inner).__name__} has no output embeddings (LM head) to narrow")

    def keep(_module, args):
        hidden = args[0]
        if hidden.shape[:2] != rows.shape:
            raise ValueError(f"LM head input {tuple(hidden.shape)} does not match the rows to keep {tuple(rows.shape)}")
        return (hidden[rows][None], *args[1:])

    handle = head.register_forward_pre_hook(keep)
    try:
        yield
    finally:
        handle.remove()


def first_action_position(action_mask: torch.Tensor) -> int:
    """The earliest trained position of any row (>= 1: token 0 has no prediction); T - 1 when none is."""
    rows = action_mask.bool().any(dim=1)
    if not rows.any():
        return max(action_mask.shape[1] - 1, 1)
    first = int(action_mask.bool().float().argmax(dim=1)[rows].min())
    return max(first, 1)
