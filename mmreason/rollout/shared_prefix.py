"""Log-probs of a group's completions with the prompt encoded once (the update's shared prefix).

The G completions of one prompt share every prompt token and image. Instead of G forward (and backward)
passes over prompt + completion, the prompt, vision tower included, runs once with a KV cache; the cache is
expanded to G rows and the G completions attend to it in one suffix pass. Gradients flow through the
cache into the prompt pass, so log-probs and every parameter's gradient equal the plain path (a test checks
both to 1e-5 in fp32), at a fraction of the cost when prompts are long (multi-page documents, video).

Positions, as the family's adapter says (``mmreason.models.families``). M-RoPE (Qwen-VL): the prompt pass
records the model's ``rope_deltas``; a completion token at sequence position ``P + j`` has text position
``P + j + delta`` on all three axes, as in generation. 1-D RoPE (InternVL): position ``P + j``.
Multi-turn trajectories carry observations after the prompt (masked: never trained), some with images or
video: their pixels go into the suffix pass, and such a row's positions come from the model's own
``get_rope_index`` over the whole row, of which the suffix keeps its part (1-D: sequence positions).

Under gradient checkpointing a layer replays its forward during backward, and a cache it wrote to would be
written twice. So the passes use caches that a replay cannot change: the prompt pass keeps the first K/V each
layer writes (``_PromptLayer``), the completions pass reads the prompt's K/V and stores nothing
(``_PrefixLayer``); the checkpointed layers are told they may keep such a cache (``_cache_through_checkpoints``).
It applies to the families whose adapter declares ``shared_prefix="kv"`` (``mmreason.models.families``); for
the others ``applies`` is False and the caller uses the plain path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer, LinearAttentionLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from mmreason.models.compat import cache_kwargs
from mmreason.models.families import family_of_model
from mmreason.models.loading import reset_position_state
from mmreason.rollout.head import chunkable_head, head_logprobs, lm_head_rows
from mmreason.types import Trajectory


def applies(model: torch.nn.Module, trajectories: list[Trajectory]) -> bool:
    """Tell whether the model can continue a cached prompt exactly (single- or multi-turn trajectories)."""
    return family_of_model(model).shared_prefix == "kv"


def _prompt_has_visual(t: Trajectory) -> bool:
    types = t.mm_token_type_ids
    return types is not None and bool(types[: t.prompt_length].ne(0).any())


def observation_visuals(t: Trajectory) -> list[dict[str, torch.Tensor]]:
    """Return the visual tensors that come after the prompt (observations' images and videos), in token order."""
    return t.visual[1:] if _prompt_has_visual(t) else list(t.visual)


def shared_prefix_logprobs(
    model: torch.nn.Module,
    trajectories: list[Trajectory],
    length: int,
    pad_token_id: int,
    with_entropy: bool = False,
    *,
    temperature: float = 1.0,
    suppressed: Sequence[int] = (),
    chunked: bool = True,
    entropy_grad: bool = False,
    _position_offset: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute ``[N, length]`` log-probs (and entropies) laid out as ``collate`` lays out the batch: row ``i`` holds
    trajectory ``i``'s completion tokens at their sequence positions, 0 elsewhere. The entropies carry an autograd graph
    only with ``entropy_grad`` (``forward.head_logprobs``)."""
    device = next(model.parameters()).device
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(trajectories):
        groups.setdefault(t.group_id, []).append(i)
    rows: list[torch.Tensor | None] = [None] * len(trajectories)
    ent_rows: list[torch.Tensor | None] = [None] * len(trajectories)
    for members in groups.values():
        lp, ent = _group(
            model,
            [trajectories[i] for i in members],
            pad_token_id,
            with_entropy,
            temperature,
            suppressed=suppressed,
            device=device,
            offset=_position_offset,
            chunked=chunked,
            entropy_grad=entropy_grad,
        )
        p = trajectories[members[0]].prompt_length
        # zeros before the completion and after the group's longest one
        pad = (p, length - p - lp.shape[1])
        for j, i in enumerate(members):
            rows[i] = torch.nn.functional.pad(lp[j], pad)
            if ent is not None:
                ent_rows[i] = torch.nn.functional.pad(ent[j], pad)
    return torch.stack(_filled(rows)), torch.stack(_filled(ent_rows)) if with_entropy else None


def _filled(rows: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """Return ``rows`` once every one is set (each trajectory belongs to one group)."""
    out = [r for r in rows if r is not None]
    assert len(out) == len(rows)
    return out


def _group(
    model: torch.nn.Module,
    group: list[Trajectory],
    pad_token_id: int,
    with_entropy: bool,
    temperature: float,
    *,
    suppressed: Sequence[int],
    device: torch.device,
    offset: int = 0,
    chunked: bool = True,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute one group's [g, L] completion log-probs (and entropies), L = its longest completion."""
    first = group[0]
    p = first.prompt_length
    prompt = first.token_ids[:p]
    for t in group[1:]:
        if t.prompt_length != p or not torch.equal(t.token_ids[:p], prompt):
            raise ValueError(f"shared prefix: trajectories of group {first.group_id} do not share their prompt")
    inner = getattr(model, "get_base_model", lambda: model)()
    backbone = inner.model
    reset_position_state(model)
    visual = {k: v.to(device) for k, v in (first.visual[0] if _prompt_has_visual(first) else {}).items()}
    types = first.mm_token_type_ids[:p] if first.mm_token_type_ids is not None else torch.zeros_like(prompt)
    ids = prompt[None].to(device)
    prompt_cache = _prompt_cache(inner)
    head = chunkable_head(model) if chunked else None
    with lm_head_rows(model, None, hidden=head is not None), _cache_through_checkpoints(backbone):
        out = model(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            mm_token_type_ids=types[None].to(device),
            **visual,
            **cache_kwargs(model, prompt_cache),
            use_cache=True,
            logits_to_keep=1,
        )
    g = len(group)
    completions = [t.token_ids[p:] for t in group]
    longest = max(int(c.numel()) for c in completions)
    # a one-token suffix pass would take a linear-attention layer's single-step path, which updates the
    # prefix's convolution state in place: one pad column more keeps every pass a multi-token one
    width = max(longest, 2) if _has_linear_layers(prompt_cache) else longest
    start = p + offset  # offset: a test's negative control only
    mrope = family_of_model(model).positions == "mrope"
    positions = _suffix_positions(backbone, start, width, g, mrope, device=device)
    suffix = torch.full((g, width), pad_token_id, dtype=torch.long)
    mask = torch.zeros(g, p + width, dtype=torch.long)
    mask[:, :p] = 1
    trained = torch.zeros(g, width, dtype=torch.bool)  # [g, width]: the tokens the model produced
    suffix_types = torch.zeros(g, width, dtype=torch.long)
    extra = [observation_visuals(t) for t in group]
    for i, (t, c) in enumerate(zip(group, completions)):
        n = c.numel()
        suffix[i, :n] = c
        mask[i, p : p + n] = 1
        trained[i, :n] = t.action_mask[p:].bool()
        if t.mm_token_type_ids is not None:
            suffix_types[i, :n] = t.mm_token_type_ids[p:]
        # observation images / video: the row's own M-RoPE positions, from the model
        if extra[i] and mrope:
            positions[:, i, :n] = _row_positions(backbone, t, device, offset)[:, p:]
    suffix, mask, trained = suffix.to(device), mask.to(device), trained.to(device)
    cache = _prefix_cache(prompt_cache, g)
    width_range = torch.arange(width, device=device)[None]
    suffix_visual = _concat([v for row in extra for v in row], device)
    # suffix position j predicts token j + 1: the LM head sees the rows that predict a trained token only
    predicts = torch.zeros_like(trained)
    predicts[:, :-1] = trained[:, 1:]
    with lm_head_rows(model, predicts, hidden=head is not None), _cache_through_checkpoints(backbone):
        rest = model(
            input_ids=suffix,
            attention_mask=mask,
            position_ids=positions,
            **cache_kwargs(model, cache),
            use_cache=True,
            mm_token_type_ids=suffix_types.to(device),
            **suffix_visual,
        )
    reset_position_state(model)  # the next caller computes its own positions
    # token 0 is predicted by the prompt's last position (one row shared by the group), the rest by the suffix
    # (the head's hidden-state inputs instead of its logits on the chunked path)
    head_out = torch.cat([out.logits[0].expand(g, -1), rest.logits[0]])
    firsts = trained & (width_range == 0)
    targets = torch.cat([suffix[:, 0], suffix[trained & ~firsts]])  # in the order of the logits rows
    lp_rows, ent_rows = head_logprobs(
        head_out,
        targets,
        head,
        with_entropy=with_entropy,
        temperature=temperature,
        suppressed=suppressed,
        zero_suppressed=False,
        entropy_grad=entropy_grad,
    )
    lp = _place(lp_rows, g, firsts, trained & ~firsts)[:, :longest]
    ent = None if ent_rows is None else _place(ent_rows, g, firsts, trained & ~firsts)[:, :longest]
    return lp, ent


class _PromptLayer(DynamicLayer):
    """The prompt pass's cache layer: keeps the first K/V written, returns what it is given (the prompt pass has
    no earlier tokens), so a checkpointed layer's replay neither changes it nor sees it twice."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.keys, self.values = key_states, value_states
        return key_states, value_states


class _PrefixLayer(DynamicLayer):
    """The completions pass's cache layer: the prompt's K/V, read only (prefix + the given states)."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.keys is not None and self.values is not None  # the prompt's, set by _prefix_cache
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)


class _PromptLinearLayer(LinearAttentionLayer):
    """The prompt pass's cache layer of a linear-attention (gated delta net) layer: keeps the first convolution
    window and final recurrent state written (by assignment: they stay in the autograd graph) and reports no
    previous state, so the pass, and a checkpointed layer's replay of it, runs as a fresh prefill."""

    def update_conv_state(
        self, conv_states: torch.Tensor, state_idx: int = 0, conv_kernel_size: int | None = None, **kwargs: Any
    ) -> torch.Tensor:
        k = conv_kernel_size or conv_states.shape[-1]
        # a prompt shorter than the kernel: zeros before it, as a prefill pads
        if conv_states.shape[-1] < k:
            conv_states = torch.nn.functional.pad(conv_states, (k - conv_states.shape[-1], 0))
        if not self.is_conv_states_initialized[state_idx]:
            self.conv_kernel_size[state_idx] = k
            self.conv_states[state_idx] = conv_states[..., -k:]
            self.is_conv_states_initialized[state_idx] = True
        return conv_states

    # transformers' LinearAttentionLayer and its mixin disagree on this signature
    def update_recurrent_state(  # type: ignore[override]
        self, recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs: Any
    ) -> torch.Tensor:
        if not self.is_recurrent_states_initialized[state_idx]:
            self.recurrent_states[state_idx] = recurrent_states
            self.is_recurrent_states_initialized[state_idx] = True
        return recurrent_states


class _PrefixLinearLayer(LinearAttentionLayer):
    """The completions pass's cache layer of a linear-attention layer: the prompt's convolution window and
    recurrent state repeated to the group's rows, read only (the window is prepended to the new inputs; the
    new final state is not kept)."""

    def __init__(self, recorded: _PromptLinearLayer, g: int) -> None:
        super().__init__(number_of_states=recorded.number_of_states)
        for i in range(recorded.number_of_states):
            conv, state = recorded.conv_states[i], recorded.recurrent_states[i]
            assert conv is not None and state is not None  # the prompt pass wrote both
            self.conv_kernel_size[i] = recorded.conv_kernel_size[i]
            self.conv_states[i] = conv.repeat_interleave(g, dim=0)
            self.recurrent_states[i] = state.repeat_interleave(g, dim=0)
            self.is_conv_states_initialized[i] = self.is_recurrent_states_initialized[i] = True
            self.has_previous_state[i] = True

    def update_conv_state(
        self, conv_states: torch.Tensor, state_idx: int = 0, conv_kernel_size: int | None = None, **kwargs: Any
    ) -> torch.Tensor:
        window = self.conv_states[state_idx]
        assert window is not None  # the prompt's, set in __init__
        return torch.cat([window, conv_states], dim=-1)

    # transformers' LinearAttentionLayer and its mixin disagree on this signature
    def update_recurrent_state(  # type: ignore[override]
        self, recurrent_states: torch.Tensor, state_idx: int = 0, **kwargs: Any
    ) -> torch.Tensor:
        return recurrent_states


def _prompt_cache(inner: torch.nn.Module) -> DynamicCache:
    """Build an empty prompt cache: ``_PromptLayer`` per attention layer, ``_PromptLinearLayer`` per linear-attention
    layer of a hybrid decoder (Qwen3.5: ``text_config.layer_types``)."""
    cache = DynamicCache()
    text = getattr(inner.config, "text_config", inner.config)
    types = list(getattr(text, "layer_types", None) or [])
    if "linear_attention" not in types:
        cache.layer_class_to_replicate = _PromptLayer
        return cache
    cache.layer_class_to_replicate = None
    cache.layers = [_PromptLinearLayer() if t == "linear_attention" else _PromptLayer() for t in types]
    return cache


def _has_linear_layers(cache: DynamicCache) -> bool:
    return any(isinstance(layer, LinearAttentionLayer) for layer in cache.layers)


def _prefix_cache(prompt_cache: DynamicCache, g: int) -> DynamicCache:
    """Repeat the prompt's K/V (and a hybrid decoder's linear-attention states) to the group's ``g`` rows, read only."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = None
    for recorded in prompt_cache.layers:
        if isinstance(recorded, _PromptLinearLayer):
            cache.layers.append(_PrefixLinearLayer(recorded, g))
            continue
        assert isinstance(recorded, DynamicLayer) and recorded.keys is not None and recorded.values is not None
        layer = _PrefixLayer()
        layer.lazy_initialization(recorded.keys, recorded.values)
        layer.keys = recorded.keys.repeat_interleave(g, dim=0)
        layer.values = recorded.values.repeat_interleave(g, dim=0)
        cache.layers.append(layer)
    return cache


@contextmanager
def _cache_through_checkpoints(backbone: Any) -> Iterator[None]:
    """Let checkpointed decoder layers keep the passed cache (ours is safe to replay), for one pass."""
    layers = [m for m in backbone.modules() if isinstance(m, GradientCheckpointingLayer)]
    before = [m.__dict__.get("_can_checkpoint_with_cache") for m in layers]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m, b in zip(layers, before):
            if b is None:
                del m._can_checkpoint_with_cache
            else:
                m._can_checkpoint_with_cache = b


def _suffix_positions(
    backbone: Any, start: int, width: int, g: int, mrope: bool, *, device: torch.device
) -> torch.Tensor:
    """Return the positions of the suffix tokens ``start .. start + width - 1``: ``[3, g, width]`` M-RoPE positions
    ``start + j + delta`` (``delta``: the prompt pass's ``rope_deltas``), or ``[g, width]`` 1-D positions ``start + j``
    (a 1-D RoPE decoder: sequence position is position, observation images included)."""
    steps = torch.arange(start, start + width, device=device)
    if not mrope:
        return steps[None].expand(g, width).clone()
    delta = backbone.rope_deltas if backbone.rope_deltas is not None else torch.zeros(1, 1, device=device)
    return (steps[None, None, :] + delta.view(1, -1, 1).to(device)).expand(3, g, width).clone()


def _row_positions(backbone: Any, t: Trajectory, device: torch.device, offset: int = 0) -> torch.Tensor:
    """Return the [3, T] M-RoPE positions of a whole trajectory (prompt, turns, observation images and video)."""
    grids = _concat(t.visual, device)
    types = t.mm_token_type_ids if t.mm_token_type_ids is not None else torch.zeros_like(t.token_ids)
    positions, _ = backbone.get_rope_index(
        t.token_ids[None].to(device),
        types[None].to(device),
        image_grid_thw=grids.get("image_grid_thw"),
        video_grid_thw=grids.get("video_grid_thw"),
        second_per_grid_ts=grids.get("second_per_grid_ts"),
        attention_mask=torch.ones_like(t.token_ids)[None].to(device),
    )
    return positions[:, 0] + offset


def _concat(chunks: list[dict[str, torch.Tensor]], device: torch.device) -> dict[str, torch.Tensor]:
    """Concatenate the visual tensors of several images / videos key by key in token order."""
    keys = dict.fromkeys(k for c in chunks for k in c)
    return {k: torch.cat([c[k] for c in chunks if k in c]).to(device) for k in keys}


def _place(values: torch.Tensor, g: int, firsts: torch.Tensor, rest: torch.Tensor) -> torch.Tensor:
    """Place [g + R] per-row values (g first tokens, then R later tokens row by row) into [g, width], 0 elsewhere."""
    zeros = values.new_zeros(firsts.shape)
    return zeros.masked_scatter(firsts, values[:g][firsts[:, 0]]) + zeros.masked_scatter(rest, values[g:])
