"""Generate G completions per prompt with HF ``generate`` and record them as Trajectories.

Each prompt's group is sampled under its own seed (run seed, step, sample id), so the rollouts of a
prompt do not depend on how prompts are split across processes or batched: a 2-process run samples
exactly what a 1-process run samples at the same global batch.
Vision special tokens are suppressed: a sampled ``<|image_pad|>`` would break the next forward.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from mmreason.models.loading import reset_position_state
from mmreason.rollout.prompts import PromptInputs
from mmreason.types import Trajectory, Turn

VISION_SPECIAL_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
                         "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
                         "<|object_ref_start|>", "<|object_ref_end|>")


@dataclass
class GenerationSettings:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    stop_strings: tuple[str, ...] = ()


def suppressed_token_ids(tokenizer) -> list[int]:
    ids = [tokenizer.convert_tokens_to_ids(t) for t in VISION_SPECIAL_TOKENS]
    unk = tokenizer.unk_token_id
    return sorted({i for i in ids if i is not None and i != unk})


def eos_token_ids(tokenizer) -> list[int]:
    ids = {tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id, tokenizer.pad_token_id}
    return sorted(i for i in ids if i is not None and i >= 0)


def group_seed(seed: int, step: int, sample_id: str, turn: int = 0) -> int:
    digest = hashlib.sha256(f"{seed}/{step}/{sample_id}/{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def sample_tokens(model, tokenizer, input_ids: torch.Tensor, mm_token_type_ids: torch.Tensor,
                  visual: dict[str, torch.Tensor], n: int, settings: GenerationSettings,
                  seed: int) -> torch.Tensor:
    """n sampled continuations of one context -> [n, L] new token ids (right-padded with pad).

    For n > 1 the context is encoded once (vision tower and prompt prefill) and its KV cache expanded to
    the n rollouts, instead of n copies of the prompt: the same samples, fewer FLOPs (1.5x faster
    generation for an 8-page prompt on the tiny model; tests/rollout check the samples are identical).
    """
    device = next(model.parameters()).device
    gen_kwargs: dict = dict(
        max_new_tokens=settings.max_new_tokens,
        do_sample=settings.temperature > 0,
        eos_token_id=eos_token_ids(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        suppress_tokens=suppressed_token_ids(tokenizer),
    )
    if settings.temperature > 0:
        gen_kwargs.update(temperature=settings.temperature, top_p=settings.top_p, top_k=settings.top_k or 0)
    if settings.stop_strings:
        gen_kwargs.update(stop_strings=list(settings.stop_strings), tokenizer=tokenizer)
    ids = input_ids[None].to(device)  # [1, P]
    reset_position_state(model)  # state left by an earlier forward; positions must be recomputed
    backbone = getattr(getattr(model, "get_base_model", lambda: model)(), "model", None)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        if n > 1 and ids.shape[1] > 1 and backbone is not None and hasattr(backbone, "rope_deltas"):
            cache = _prefill(model, backbone, ids, mm_token_type_ids[None].to(device),
                             {k: v.to(device) for k, v in visual.items()}, n)
            torch.manual_seed(seed)
            out = model.generate(input_ids=ids.expand(n, -1), attention_mask=torch.ones_like(ids).expand(n, -1),
                                 cache=cache, **gen_kwargs)
        else:
            torch.manual_seed(seed)
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 mm_token_type_ids=mm_token_type_ids[None].to(device),
                                 **{k: v.to(device) for k, v in visual.items()}, num_return_sequences=n,
                                 **gen_kwargs)
    return out[:, input_ids.numel():].cpu()


def _prefill(model, backbone, ids: torch.Tensor, types: torch.Tensor, visual: dict[str, torch.Tensor], n: int):
    """Encode all but the last prompt token once and expand the KV cache (and M-RoPE deltas) to n rows.

    The last token stays uncached so generate() starts from real logits; it is text (the assistant
    header), so no vision features are needed after the prefill.
    """
    out = model(input_ids=ids[:, :-1], attention_mask=torch.ones_like(ids[:, :-1]),
                mm_token_type_ids=types[:, :-1], **visual, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    cache.batch_repeat_interleave(n)
    if backbone.rope_deltas is not None:  # None after a text-only prompt: positions are plain offsets
        backbone.rope_deltas = backbone.rope_deltas.repeat_interleave(n, dim=0)
    return cache


def cut_at_eos(tokens: torch.Tensor, eos_ids: list[int], pad_id: int) -> tuple[torch.Tensor, bool]:
    """Keep tokens up to and including the first EOS; (ids, truncated = no EOS reached)."""
    keep = tokens[tokens != pad_id] if pad_id not in eos_ids else tokens
    for i, tok in enumerate(keep.tolist()):
        if tok in eos_ids:
            return keep[: i + 1], False
    return keep, True


def generate_group(model, processor, prompt: PromptInputs, group_id: int, num_generations: int,
                   settings: GenerationSettings, seed: int) -> list[Trajectory]:
    """One prompt -> G single-turn trajectories (completion tokens carry action_mask = 1)."""
    tokenizer = processor.tokenizer
    eos = eos_token_ids(tokenizer)
    new = sample_tokens(model, tokenizer, prompt.input_ids, prompt.mm_token_type_ids, prompt.visual,
                        num_generations, settings, seed)
    trajectories = []
    for row in new:
        completion, truncated = cut_at_eos(row, eos, tokenizer.pad_token_id)
        text = tokenizer.decode(completion, skip_special_tokens=True)
        ids = torch.cat([prompt.input_ids, completion])
        mask = torch.zeros_like(ids)
        mask[prompt.length:] = 1
        types = torch.cat([prompt.mm_token_type_ids, torch.zeros_like(completion)])
        trajectories.append(Trajectory(
            sample_id=prompt.sample.id, group_id=group_id, token_ids=ids, action_mask=mask,
            prompt_length=prompt.length, completion_text=text, truncated=truncated,
            turns=[Turn("assistant", text, prompt.length, int(ids.numel()))],
            mm_token_type_ids=types, visual=[prompt.visual] if prompt.visual else [],
        ))
    return trajectories
