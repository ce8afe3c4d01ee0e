"""Batched generation over prompts of different lengths: left padding, one ``generate`` call per batch.

The trainer's generation path (``mmreason.rollout.generate.sample_rows``) with one row per doc: left
padding keeps every prompt's last token at the same column and Qwen's M-RoPE positions come from the
attention mask, so batched greedy output equals per-prompt output.

Sampling (temperature > 0) is seeded per doc, not per batch: each row draws its tokens from its own
``torch.Generator`` seeded by (run seed, doc id) (``mmreason.rollout.row_sampling.RowSeededSampling``, the
same sampler the trainer uses). A doc's sample therefore does not depend on which docs share its batch,
on the batch size, or on whether the run was resumed.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from mmreason.rollout.generate import GenerationSettings, cut_at_eos, eos_token_ids, sample_rows
from mmreason.rollout.prompts import PromptInputs

if TYPE_CHECKING:
    from transformers import ProcessorMixin


@dataclass
class Completion:
    token_ids: torch.Tensor  # [L] new tokens up to and including the first EOS
    text: str
    truncated: bool  # max_new_tokens reached before EOS


def generate_batch(
    model: Any,
    processor: ProcessorMixin,
    prompts: list[PromptInputs],
    settings: GenerationSettings,
    seeds: list[int] | None = None,
    *,
    lock: threading.Lock | None = None,
) -> list[Completion]:
    """One ``generate`` call for N prompts; greedy when ``settings.temperature == 0``.

    ``model`` is an HF model or a rollout engine (``is_rollout_backend``, e.g. vLLM's), whose ``sample`` takes
    the prompts; ``lock`` guards the tokenizer while decoding when another thread builds prompts meanwhile.
    """
    tokenizer = processor.tokenizer
    eos = eos_token_ids(tokenizer)
    if getattr(model, "is_rollout_backend", False):  # a vLLM engine (``--model_args backend=vllm``)
        rows = model.sample(prompts, 1, settings, seeds or [0] * len(prompts))
        with lock or contextlib.nullcontext():
            return [
                Completion(
                    torch.tensor(ids, dtype=torch.long), tokenizer.decode(ids, skip_special_tokens=True), truncated
                )
                for ids, _, truncated in rows
            ]
    new = sample_rows(model, tokenizer, prompts, 1, settings, seeds=seeds or [0] * len(prompts))  # [N, L]
    completions = []
    with lock or contextlib.nullcontext():
        for row in new:
            ids, truncated = cut_at_eos(row, eos, tokenizer.pad_token_id)
            completions.append(Completion(ids, tokenizer.decode(ids, skip_special_tokens=True), truncated))
    return completions
