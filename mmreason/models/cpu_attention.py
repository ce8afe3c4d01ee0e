"""SDPA with its arithmetic in fp32 for bf16 / fp16 models on the CPU.

PyTorch's CPU flash-attention kernel is slower in bf16 than in fp32 at every shape of this suite (one core,
head size 32: a decoding step's query against a 600-token cache takes 550 us in bf16, 90 us in fp32; a 559-token
prefill 2.0 ms against 1.8 ms), so bf16 generation was slower than fp32 although its matmuls are 4-5x faster.
``sdpa_fp32`` runs transformers' own SDPA on fp32 copies of the bf16 query, keys and values and returns the
output in the model's dtype: the projections around it stay bf16, and the attention's softmax and sums are
fp32, as a GPU's flash attention accumulates. On tensors that are fp32 already, or not on the CPU, it is
transformers' SDPA unchanged. ``load_model`` picks it for a bf16 / fp16 model with SDPA attention on a
machine without CUDA.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "sdpa_fp32"


def sdpa_fp32_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *args: Any,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    dtype = query.dtype
    if dtype == torch.float32 or query.device.type != "cpu":
        return sdpa_attention_forward(module, query, key, value, attention_mask, *args, **kwargs)
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.float()
    out, weights = sdpa_attention_forward(
        module, query.float(), key.float(), value.float(), attention_mask, *args, **kwargs
    )
    return out.to(dtype), weights


AttentionInterface.register(NAME, sdpa_fp32_attention)
AttentionMaskInterface.register(NAME, sdpa_mask)
