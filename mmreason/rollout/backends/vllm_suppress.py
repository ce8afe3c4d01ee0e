"""The vision special tokens a vLLM engine never samples, masked by one logits processor of the whole engine.

The HF path suppresses the family's vision specials (``rollout.generate.suppressed_token_ids``: about ten ids)
by setting their logits to -inf before temperature; the trainer scores the same distribution. A request's
``allowed_token_ids`` would do the same per request, but it is the whole vocabulary less those ids (~152k
integers for Qwen), built, validated and sent with every row. This processor sets the ids' logits to -inf for
every row of every step in one indexed fill, before temperature and before vLLM computes the returned
log-probs (``logprobs_mode="processed_logprobs"``), where vLLM applies ``allowed_token_ids`` itself: the
distribution, and so the log-probs the trainer compares, are the same. vLLM's ``logit_bias`` cannot stand in:
it clamps a bias to [-100, 100] and adds it before temperature, so a suppressed token keeps some probability.

vLLM loads the class by name in each engine's worker (``vllm_placement.SUPPRESS_PROCESSOR``); the ids come
in the engine's ``additional_config`` (``SUPPRESS_KEY``). This module imports vLLM, so only the engine imports it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor

from mmreason.rollout.backends.vllm_placement import SUPPRESS_KEY


class SuppressTokens(LogitsProcessor):
    """Logits of the configured token ids set to -inf for every row (greedy and sampled alike)."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        vocab = int(vllm_config.model_config.get_vocab_size())
        ids = (getattr(vllm_config, "additional_config", None) or {}).get(SUPPRESS_KEY) or []
        kept = sorted({int(i) for i in ids if 0 <= int(i) < vocab})
        self.ids = torch.tensor(kept, dtype=torch.long, device=device)

    def is_argmax_invariant(self) -> bool:
        # a suppressed token may be the argmax: greedy rows must not pick it either
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        # the same ids for every request: nothing per request to track
        pass

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.ids.numel():
            logits.index_fill_(-1, self.ids, float("-inf"))
        return logits
