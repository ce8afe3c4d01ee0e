"""Padding-free log-probs: a mini-batch's sequences packed into one row, each with its own positions.

``collate`` right-pads every row to the longest of its mini-batch, and the model computes every pad column in
every layer, forward and backward. Packed, the N sequences of lengths ``L_i`` become one row of ``sum L_i``
tokens with no padding:

- positions are each sequence's own. M-RoPE families (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE): the
  three-axis positions of every sequence come from the family's own ``get_rope_index`` (which walks the
  sequences one by one, its image and video grids in batch order, as the padded forward does), the pad
  columns are dropped and the rest concatenated; a fourth, leading row holds each sequence's text positions
  ``0 .. L_i - 1`` (transformers' packed-input layout ``[4, 1, sum L_i]``). 1-D RoPE (InternVL): ``0 .. L_i - 1``
  per sequence, concatenated.
- sequence boundaries come from those text positions (a reset to 0 starts a sequence) and no attention mask
  is passed. SDPA (CPUs, GPUs without flash-attention) attends sequence by sequence, causal, unmasked
  (``packed_attention``: the dense block-diagonal mask transformers would build costs ``(sum L_i)^2`` scores,
  and measured 1.3x slower on a long-tailed mix); eager attention takes transformers' block-diagonal mask
  (``masking_utils.find_packed_sequence_indices``); flash-attention takes its varlen kernel with ``cu_seqlens``
  from the same resets (``modeling_flash_attention_utils._is_packed_sequence``). Nothing of flash-attention is
  imported here.
- the vision inputs are the padded batch's: every sequence's pixels and grids concatenated in sequence order
  (the order the packed row's visual tokens come in), so the vision tower runs the same call.

The LM head sees only the positions that predict a trained token, as on the padded path, and the log-probs
come back laid out as ``collate`` lays out the batch (``[N, T]``, 0 off the trained tokens), so every caller
and loss is unchanged. Tests check log-probs, entropies and gradients against the padded path on every family
(1e-5, fp32). Not exact, so refused (``refusal``): a decoder with linear-attention layers (Qwen3.5's gated
delta net): transformers' CPU kernels of its causal convolution and recurrence ignore sequence boundaries, so
one sequence's state would flow into the next; and an attention implementation whose mask transformers does
not build (packing would then attend across sequences).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from mmreason.models.families import family_of_model
from mmreason.models.loading import reset_position_state
from mmreason.rollout.packed_attention import segment_attention
from mmreason.rollout.sharded_head import head_pass

if TYPE_CHECKING:
    from mmreason.rollout.forward import ModelBatch

# attention implementations packed exactly: sdpa and mmreason's sdpa_fp32 (models/cpu_attention.py) sequence by
# sequence (packed_attention.py) or, checkpointed, under transformers' block-diagonal mask, as eager; flash_attention_*
# through its varlen kernel (transformers' position-id path; not run on this project's CPUs)
PACKED_ATTENTION = ("sdpa", "eager", "sdpa_fp32")


def refusal(model: torch.nn.Module) -> str | None:
    """Say why ``model`` cannot run packed exactly, or None when it can."""
    inner = _inner(model)
    text = getattr(inner.config, "text_config", inner.config)
    if "linear_attention" in (getattr(text, "layer_types", None) or ()):
        return "its linear-attention (gated delta net) layers' CPU kernels carry state across sequence boundaries"
    attention = str(getattr(text, "_attn_implementation", None) or "")
    if attention not in PACKED_ATTENTION and not attention.startswith("flash_attention"):
        return f"attention {attention!r} has no packed-sequence mask in transformers"
    return None


def applies(model: torch.nn.Module) -> bool:
    """Tell whether ``model``'s log-probs can be taken packed, exactly (``refusal`` is None)."""
    return refusal(model) is None


def uses(padding_free: bool, model: torch.nn.Module) -> bool:
    """Tell whether a log-prob pass of ``model`` runs packed: the run asks for it (``padding_free``) and it is exact."""
    return padding_free and applies(model)


def packed_logprobs(
    model: torch.nn.Module,
    batch: ModelBatch,
    with_entropy: bool = False,
    *,
    temperature: float = 1.0,
    suppressed: Sequence[int] = (),
    chunked: bool = True,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute ``token_logprobs`` of ``batch`` from one forward over its sequences packed into a single row: ``[N, T]``
    log-probs (and entropies) laid out as the padded batch, 0 wherever ``action_mask`` is 0. An FSDP2-sharded head
    computes them inside its forward (``rollout.sharded_head``), as unpacked."""
    reset_position_state(model)
    n, t = batch.input_ids.shape
    keep = batch.attention_mask.bool()  # [N, T] the real tokens (right padding)
    trained = batch.action_mask.bool().clone()
    trained[:, 0] = False  # token 0 has no prediction
    # position j of a sequence predicts its token j + 1: shift left, then drop the pad columns
    predicts = torch.nn.functional.pad(trained[:, 1:], (0, 1))[keep][None]  # [1, sum L_i]
    visual = batch.visual
    inner = _inner(model)
    decoder = getattr(inner.config, "text_config", inner.config)
    targets = batch.input_ids[trained]  # [M] in row-major order, as the head's rows come
    narrowed = head_pass(
        model,
        predicts,
        targets,
        chunked=chunked,
        with_entropy=with_entropy,
        temperature=temperature,
        suppressed=suppressed,
        entropy_grad=entropy_grad,
    )
    with narrowed as read, segment_attention(decoder, inner):
        out = model(
            input_ids=batch.input_ids[keep][None],
            position_ids=packed_positions(model, batch, visual),
            mm_token_type_ids=batch.mm_token_type_ids[keep][None],
            **visual,
            use_cache=False,
        )
    reset_position_state(model)
    lp, ent = read(out.logits)
    logprobs = lp.new_zeros(n, t).masked_scatter(trained, lp)
    entropy = None if ent is None else ent.new_zeros(n, t).masked_scatter(trained, ent)
    return logprobs, entropy


def packed_positions(model: torch.nn.Module, batch: ModelBatch, visual: dict[str, torch.Tensor]) -> torch.Tensor:
    """Return the packed row's positions: ``[4, 1, sum L_i]`` (text positions, then the three M-RoPE axes) for an M-RoPE
    family, ``[1, sum L_i]`` sequence positions for a 1-D RoPE one."""
    keep = batch.attention_mask.bool()
    text = (batch.attention_mask.long().cumsum(1) - 1)[keep][None]  # [1, sum L_i]: 0 .. L_i - 1 per sequence
    if family_of_model(model).positions != "mrope":
        return text
    grids = {k: visual[k] for k in ("image_grid_thw", "video_grid_thw", "second_per_grid_ts") if k in visual}
    if not any(k in grids for k in ("image_grid_thw", "video_grid_thw")):
        return text[None].expand(4, 1, -1)  # no visual token: all three axes are the text position
    positions, _ = _backbone(model).get_rope_index(
        batch.input_ids,
        batch.mm_token_type_ids,
        attention_mask=batch.attention_mask,
        **grids,
    )  # [3, N, T]: each sequence's own, 0 on its pad columns
    return torch.cat([text[None], positions[:, keep].to(text.device)[:, None]])


def _inner(model: torch.nn.Module) -> Any:
    """Return the model under DDP / accelerate and PEFT wrappers."""
    model = getattr(model, "module", model)
    return getattr(model, "get_base_model", lambda: model)()


def _backbone(model: torch.nn.Module) -> Any:
    return _inner(model).model
