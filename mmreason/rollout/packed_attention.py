"""Causal SDPA sequence by sequence over a packed row: the exact CPU (and flash-less GPU) attention of packing.

transformers makes a packed row exact under sdpa by a dense block-diagonal causal mask over the whole row
(``masking_utils.find_packed_sequence_indices``): ``(sum L_i)^2`` scores per head, where the padded batch computes
``N max(L_i)^2`` and the sequences need only ``sum L_i^2``. On a long-tailed mix (``mmreason bench packing``'s model,
2 prompts x G = 4, completions 13 to 256 tokens, one CPU thread) the packed update took 0.60x the padded one's CPU
time under the dense mask and 0.45x sequence by sequence (peak tensor memory 676 against 611 MiB). Here, during a packed forward, the
decoder's attention runs the model's own SDPA function once per sequence with ``is_causal`` and no mask (the
boundaries: where the text positions reset to 0, read from the ``position_ids`` every decoder layer passes to its
attention), as flash-attention's varlen kernel does on a GPU. The vision tower keeps its own attention.

Only while the forward runs (``segment_attention``): the decoder's config names ``sdpa_segments`` (or
``sdpa_fp32_segments``), whose mask builder returns no mask. A gradient-checkpointed decoder replays its layers
in backward, after the block, so it keeps transformers' dense mask (exact, slower).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface

from mmreason.models import cpu_attention

SEGMENTED = {"sdpa": "sdpa_segments", cpu_attention.NAME: f"{cpu_attention.NAME}_segments"}
_BASE = {"sdpa": sdpa_attention_forward, cpu_attention.NAME: cpu_attention.sdpa_fp32_attention}


def _segments(base: Callable[..., tuple[torch.Tensor, Any]]) -> Callable[..., tuple[torch.Tensor, None]]:
    def attention(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        *args: Any,
        position_ids: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        """Attend over [1, H, L, D] packed queries, keys and values -> [1, L, H, D]: ``base`` per sequence, causal."""
        if position_ids is None or query.shape[0] != 1:
            raise ValueError("packed attention needs the packed row's text positions (position_ids [1, L])")
        starts = torch.nonzero(position_ids[0] == 0).flatten().tolist()
        bounds = list(zip(starts, [*starts[1:], query.shape[2]]))
        outs = [
            base(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None, *args, is_causal=True, **kwargs)[0]
            for s, e in bounds
        ]
        return torch.cat(outs, dim=1), None

    return attention


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None  # each sequence's causal attention needs none


for _name, _segmented in SEGMENTED.items():
    AttentionInterface.register(_segmented, _segments(_BASE[_name]))
    AttentionMaskInterface.register(_segmented, _no_mask)


@contextmanager
def segment_attention(decoder_config: Any, model: torch.nn.Module) -> Iterator[None]:
    """Make the decoder (``decoder_config``: its text config) attend, inside the block, sequence by sequence, when its
    attention is SDPA and no layer is gradient-checkpointed; otherwise nothing changes."""
    before = getattr(decoder_config, "_attn_implementation", None)
    checkpointed = any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
    if before not in SEGMENTED or checkpointed:
        yield
        return
    decoder_config._attn_implementation = SEGMENTED[before]
    try:
        yield
    finally:
        decoder_config._attn_implementation = before
