"""Batched generation over prompts of different lengths: left padding, one ``generate`` call per batch.

Left padding keeps every prompt's last token at the same column, so new tokens append on the right.
Qwen's M-RoPE positions are computed from the attention mask (pads get none), so a prompt's tokens,
positions and visual tensors are those it has alone: batched greedy output equals per-prompt output.

Sampling (temperature > 0) is seeded per doc, not per batch: a logits processor draws each row's next
token from its own ``torch.Generator`` seeded by (run seed, doc id), and hands ``generate`` a one-hot
distribution that greedy decoding then picks. A doc's sample therefore does not depend on which docs
share its batch, on the batch size, or on whether the run was resumed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from mmreason.models.loading import reset_position_state
from mmreason.rollout.generate import GenerationSettings, cut_at_eos, eos_token_ids, suppressed_token_ids
from mmreason.rollout.prompts import VISUAL_KEYS, PromptInputs


@dataclass
class Completion:
    token_ids: torch.Tensor  # [L] new tokens up to and including the first EOS
    text: str
    truncated: bool  # max_new_tokens reached before EOS


def collate_left(prompts: list[PromptInputs], pad_token_id: int) -> dict[str, torch.Tensor]:
    """N prompts -> generate() kwargs: input_ids / attention_mask / mm_token_type_ids [N, P], left-padded;
    visual tensors concatenated in batch order (the order the model consumes them in)."""
    width = max(p.length for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)  # [N, P]
    mask = torch.zeros_like(ids)  # [N, P] 0 on pads
    types = torch.zeros_like(ids)  # [N, P] pads are text (0): they get no visual position
    for i, p in enumerate(prompts):
        ids[i, width - p.length:] = p.input_ids
        mask[i, width - p.length:] = 1
        types[i, width - p.length:] = p.mm_token_type_ids
    visual: dict[str, torch.Tensor] = {}
    for key in VISUAL_KEYS:
        chunks = [p.visual[key] for p in prompts if key in p.visual]
        if chunks:
            visual[key] = torch.cat(chunks, dim=0)
    return {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types, **visual}


class RowSeededSampling:
    """A logits processor: temperature / top-k / top-p sampling with one generator per row.

    scores [N, V] -> [N, V] that is 0 at the drawn token and -inf elsewhere (so greedy picks it).
    """

    def __init__(self, seeds: list[int], settings: GenerationSettings, device: torch.device):
        self.settings = settings
        self.generators = [torch.Generator(device=device).manual_seed(s) for s in seeds]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        s = self.settings
        logits = scores.float() / s.temperature  # [N, V]
        if s.top_k:
            kth = torch.topk(logits, min(s.top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # [N, 1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if s.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True, dim=-1)  # [N, V]
            sorted_probs = sorted_logits.softmax(-1)
            # Drop a token when the mass before it already reaches top_p: the smallest prefix is kept.
            drop = sorted_probs.cumsum(-1) - sorted_probs >= s.top_p  # [N, V] in sorted order
            logits = logits.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), float("-inf"))
        probs = logits.softmax(-1)  # [N, V]
        picks = torch.cat([torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(self.generators)])
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(1, picks[:, None], 0.0)


def generate_batch(model, processor, prompts: list[PromptInputs], settings: GenerationSettings,
                   seeds: list[int] | None = None, lock=None) -> list[Completion]:
    """One ``generate`` call for N prompts; greedy when ``settings.temperature == 0``.

    ``lock`` guards the tokenizer while decoding when another thread builds prompts meanwhile.
    """
    from transformers import LogitsProcessorList

    tokenizer = processor.tokenizer
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in collate_left(prompts, tokenizer.pad_token_id).items()}
    eos = eos_token_ids(tokenizer)
    processors = LogitsProcessorList()
    if settings.temperature > 0:
        processors.append(RowSeededSampling(seeds or [0] * len(prompts), settings, device))
    reset_position_state(model)  # left over from a previous call with other prompts
    with torch.no_grad():  # not inference_mode: the in-training hook generates with the trained model
        out = model.generate(
            **batch, max_new_tokens=settings.max_new_tokens, do_sample=False, num_beams=1,
            repetition_penalty=1.0,  # a checkpoint's generation_config may set one; eval uses gen_kwargs only
            logits_processor=processors, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id,
            suppress_tokens=suppressed_token_ids(tokenizer),
        )
    new = out[:, batch["input_ids"].shape[1]:].cpu()  # [N, L]
    completions = []
    with lock or contextlib.nullcontext():
        for row in new:
            ids, truncated = cut_at_eos(row, eos, tokenizer.pad_token_id)
            completions.append(Completion(ids, tokenizer.decode(ids, skip_special_tokens=True), truncated))
    return completions
