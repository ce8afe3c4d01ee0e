"""Generate G completions per prompt with HF ``generate`` and record them as Trajectories.

All groups of a step generate in one batched call: prompts are left-padded to one width, each prompt
(vision tower and prefill) is encoded once and its KV cache expanded to its G rows, and every row samples
from its own seeded stream (``row_sampling.RowSeededSampling``). Row r of a group draws with the r-th
seed derived from the group's seed (run seed, step, sample id), so what a prompt's rollouts sample does
not depend on which prompts share the call, on how prompts are split across processes or batched, or on
the global RNG: one batched call samples exactly what per-group calls sample, and a 2-process run
samples what a 1-process run samples at the same global batch.
Vision special tokens are suppressed: a sampled ``<|image_pad|>`` would break the next forward.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers.cache_utils import DynamicLayer, LinearAttentionLayer

from mmreason.models.compat import cache_kwargs, output_cache
from mmreason.models.families import family_of_model, never_sampled_tokens, turn_end_tokens
from mmreason.models.loading import reset_position_state
from mmreason.rollout.prompts import VISUAL_KEYS, PromptInputs
from mmreason.rollout.row_sampling import (
    GreedyLogprobs,
    RowSeededSampling,
    SuppressTokens,
    row_seeds,
    stacked_logprobs,
)
from mmreason.types import Trajectory, Turn

if TYPE_CHECKING:
    from transformers import DynamicCache, PreTrainedTokenizerBase, ProcessorMixin

VISION_SPECIAL_TOKENS = never_sampled_tokens()  # every family's (models/families); a tokenizer has its own


@dataclass
class GenerationSettings:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    stop_strings: tuple[str, ...] = ()


def _known_ids(tokenizer: PreTrainedTokenizerBase, tokens: Iterable[str]) -> set[int]:
    """Return the ids of those of ``tokens`` the tokenizer holds as single tokens (not unknown)."""
    ids = [tokenizer.convert_tokens_to_ids(t) for t in tokens]
    unk = tokenizer.unk_token_id
    return {i for i in ids if isinstance(i, int) and i >= 0 and i != unk}


def suppressed_token_ids(tokenizer: Any) -> list[int]:  # a tokenizer, or bench's id table
    """Return the never-sampled special tokens of the tokenizer's family (each family's adapter lists its own)."""
    return sorted(_known_ids(tokenizer, VISION_SPECIAL_TOKENS))


def eos_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    ids = _known_ids(tokenizer, turn_end_tokens()) | {tokenizer.eos_token_id, tokenizer.pad_token_id}
    return sorted(i for i in ids if i is not None and i >= 0)


def group_seed(seed: int, step: int, sample_id: str, turn: int = 0) -> int:
    digest = hashlib.sha256(f"{seed}/{step}/{sample_id}/{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def collate_left(prompts: Sequence[PromptInputs], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Collate N prompts into generate() kwargs: input_ids / attention_mask / mm_token_type_ids [N, P], left-padded;
    visual tensors concatenated in batch order (the order the model consumes them in).

    Left padding keeps every prompt's last token in the last column, so new tokens append on the right.
    Qwen's M-RoPE positions are computed from the attention mask (pads get none), so a prompt's tokens,
    positions and visual tensors are those it has alone."""
    width = max(p.length for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)  # [N, P]
    mask = torch.zeros_like(ids)  # [N, P] 0 on pads
    types = torch.zeros_like(ids)  # [N, P] pads are text (0): they get no visual position
    for i, p in enumerate(prompts):
        ids[i, width - p.length :] = p.input_ids
        mask[i, width - p.length :] = 1
        types[i, width - p.length :] = p.mm_token_type_ids
    visual: dict[str, torch.Tensor] = {}
    for key in VISUAL_KEYS:
        chunks = [p.visual[key] for p in prompts if key in p.visual]
        if chunks:
            visual[key] = torch.cat(chunks, dim=0)
    return {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": types, **visual}


def sample_rows(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[PromptInputs],
    n: int,
    settings: GenerationSettings,
    *,
    seeds: Sequence[int],
) -> torch.Tensor:
    """Sample as ``sample_rows_scored`` does; return the token ids alone."""
    return sample_rows_scored(model, tokenizer, prompts, n, settings, seeds=seeds)[0]


def sample_rows_scored(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[PromptInputs],
    n: int,
    settings: GenerationSettings,
    *,
    seeds: Sequence[int],
    with_logprobs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Sample n continuations of each of N prompts in one ``generate`` call -> [N * n, L] new token ids (row
    ``i * n + r`` is prompt i's r-th, right-padded with pad). ``seeds``: one per row (N * n), unused when greedy
    (``settings.temperature == 0``).

    For n > 1 each prompt is encoded once (vision tower and prompt prefill) and its KV cache expanded to
    its n rows, instead of n copies of the prompt: the same samples, fewer FLOPs (tests/rollout check it).
    Returns (ids, log-probs): with ``with_logprobs`` the second is [N * n, L] float32, each new token's log-prob
    as the sampler drew it (fp32, after the suppressed tokens, temperature, top-k and top-p; greedy: of the
    softmax), recorded inside the decoding loop (no extra forward); else None.
    """
    from transformers import LogitsProcessorList

    if settings.temperature > 0 and len(seeds) != len(prompts) * n:
        raise ValueError(f"sample_rows: {len(seeds)} seeds for {len(prompts)} prompts x {n} rows")
    device = next(model.parameters()).device
    eos = eos_token_ids(tokenizer)
    # the vision specials at -inf by index (transformers' suppress_tokens rebuilds a vocabulary mask with isin
    # at every step: 0.6 ms a step over a 151k vocabulary); the same scores
    processors = LogitsProcessorList([SuppressTokens(suppressed_token_ids(tokenizer))])
    recorder: RowSeededSampling | GreedyLogprobs | None = None
    if settings.temperature > 0:
        recorder = RowSeededSampling(seeds, settings, record_logprobs=with_logprobs)
        processors.append(recorder)
    elif with_logprobs:
        recorder = GreedyLogprobs()
        processors.append(recorder)
    gen_kwargs: dict = dict(
        max_new_tokens=settings.max_new_tokens,
        do_sample=False,
        num_beams=1,
        # a checkpoint's generation_config may set one: the trainer's log-probs have none
        repetition_penalty=1.0,
        logits_processor=processors,
        eos_token_id=eos,
        pad_token_id=tokenizer.pad_token_id,
    )
    if settings.stop_strings:
        gen_kwargs.update(stop_strings=list(settings.stop_strings), tokenizer=tokenizer)
    # state left by an earlier forward; positions must be recomputed
    reset_position_state(model)
    backbone = getattr(getattr(model, "get_base_model", lambda: model)(), "model", None)
    family = family_of_model(model)
    prefill = n > 1 and min(p.length for p in prompts) > 1 and family.shared_prefix in ("kv", "generation")
    batch = {
        k: v.to(device)
        for k, v in collate_left(
            prompts if prefill else [p for p in prompts for _ in range(n)], tokenizer.pad_token_id
        ).items()
    }
    # the token types drive M-RoPE positions only; other families take none
    if family.positions != "mrope":
        batch.pop("mm_token_type_ids")
    # not inference_mode: the in-training hook generates with the trained model
    with torch.no_grad():
        if prefill:
            cache = _prefill(model, backbone, batch, n, family.positions == "mrope")
            out = model.generate(
                input_ids=batch["input_ids"].repeat_interleave(n, dim=0),
                attention_mask=batch["attention_mask"].repeat_interleave(n, dim=0),
                **cache_kwargs(model, cache),
                **gen_kwargs,
            )
        else:
            out = model.generate(**batch, **gen_kwargs)
    reset_position_state(model)  # the next caller computes its own positions
    new = out[:, batch["input_ids"].shape[1] :].cpu()  # [N * n, L]
    if recorder is None or recorder.logprobs is None:
        return new, None
    return new, stacked_logprobs(recorder.logprobs, new.shape[0])[:, : new.shape[1]]


def _prefill(model: Any, backbone: Any, batch: dict[str, torch.Tensor], n: int, mrope: bool = True) -> DynamicCache:
    """Encode all but the last column of the left-padded prompts once; expand the KV cache and the M-RoPE
    deltas to n rows per prompt (``mrope`` False: 1-D positions from the attention mask, no deltas).

    Positions are computed here from the attention mask (``get_rope_index``; text-only rows too, whose
    left pads the model's own fallback would count), and generate() continues them from the deltas. The
    last column stays uncached so generate() starts from real logits; it is text (the assistant header),
    so no vision features are needed after the prefill.
    """
    ids, mask = batch["input_ids"][:, :-1], batch["attention_mask"][:, :-1]
    inputs = {k: batch[k] for k in VISUAL_KEYS if k in batch}
    if mrope:
        types = batch["mm_token_type_ids"][:, :-1]
        inputs["mm_token_type_ids"] = types
        positions, deltas = backbone.get_rope_index(
            ids,
            mm_token_type_ids=types,
            image_grid_thw=inputs.get("image_grid_thw"),
            video_grid_thw=inputs.get("video_grid_thw"),
            second_per_grid_ts=inputs.get("second_per_grid_ts"),
            attention_mask=mask,
        )
    # 1-D RoPE: a token's position counts the real tokens before it (left pads get none)
    else:
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, **inputs, use_cache=True, logits_to_keep=1)
    cache = output_cache(out)
    _repeat_rows(cache, n)
    if mrope:
        backbone.rope_deltas = deltas.to(ids.device).repeat_interleave(n, dim=0)
    return cache


def _repeat_rows(cache: DynamicCache, n: int) -> None:
    """Repeat each row of the prefilled cache n times in place: K/V, and a hybrid decoder's linear-attention convolution
    windows and recurrent states (transformers' ``LinearAttentionLayer`` has no ``batch_repeat_interleave`` of its
    own)."""
    for layer in cache.layers:
        if isinstance(layer, LinearAttentionLayer):
            for i in range(layer.number_of_states):
                for states in (layer.conv_states, layer.recurrent_states):
                    state = states[i]
                    if state is not None:
                        states[i] = state.repeat_interleave(n, dim=0)
        if isinstance(layer, DynamicLayer) and layer.is_initialized:
            layer.batch_repeat_interleave(n)


def cut_at_eos(tokens: torch.Tensor, eos_ids: list[int], pad_id: int) -> tuple[torch.Tensor, bool]:
    """Keep tokens up to and including the first EOS; (ids, truncated = no EOS reached)."""
    keep = tokens[tokens != pad_id] if pad_id not in eos_ids else tokens
    for i, tok in enumerate(keep.tolist()):
        if tok in eos_ids:
            return keep[: i + 1], False
    return keep, True


def generate_groups(
    model: Any,
    processor: Any,  # a processor, or anything with its ``tokenizer`` (bench)
    prompts: Sequence[PromptInputs],
    group_ids: Sequence[int],
    num_generations: int,
    *,
    settings: GenerationSettings,
    seeds: Sequence[int],
    with_logprobs: bool = False,
) -> list[Trajectory]:
    """Generate N x G single-turn trajectories from N prompts (group by group) in one ``generate`` call; group i's rows
    sample with ``row_seeds(seeds[i], G)``, exactly as ``generate_group(prompts[i], seed=seeds[i])``. ``with_logprobs``:
    each trajectory carries the sampler's log-probs as ``rollout_logprobs`` ([T], 0 on the prompt), as the vLLM
    backend's do (``rollout.hf_sampler_logprobs``)."""
    if not prompts:
        return []
    tokenizer = processor.tokenizer
    eos = eos_token_ids(tokenizer)
    row_seed_list = [s for seed in seeds for s in row_seeds(seed, num_generations)]
    new, lps = sample_rows_scored(
        model, tokenizer, prompts, num_generations, settings, seeds=row_seed_list, with_logprobs=with_logprobs
    )  # [N * G, L]
    trajectories = []
    for i, row in enumerate(new):
        prompt, group_id = prompts[i // num_generations], group_ids[i // num_generations]
        completion, truncated = cut_at_eos(row, eos, tokenizer.pad_token_id)
        text = tokenizer.decode(completion, skip_special_tokens=True)
        ids = torch.cat([prompt.input_ids, completion])
        mask = torch.zeros_like(ids)
        mask[prompt.length :] = 1
        types = torch.cat([prompt.mm_token_type_ids, torch.zeros_like(completion)])
        rollout_lp = None
        if lps is not None:  # cut_at_eos keeps a prefix of the row: the same positions
            rollout_lp = torch.zeros(ids.numel(), dtype=torch.float32)
            rollout_lp[prompt.length :] = lps[i, : completion.numel()]
        trajectories.append(
            Trajectory(
                sample_id=prompt.sample.id,
                group_id=group_id,
                token_ids=ids,
                action_mask=mask,
                prompt_length=prompt.length,
                completion_text=text,
                truncated=truncated,
                turns=[Turn("assistant", text, prompt.length, int(ids.numel()))],
                mm_token_type_ids=types,
                visual=[prompt.visual] if prompt.visual else [],
                rollout_logprobs=rollout_lp,
            )
        )
    return trajectories


def generate_group(
    model: Any,
    processor: ProcessorMixin,
    prompt: PromptInputs,
    group_id: int,
    num_generations: int,
    *,
    settings: GenerationSettings,
    seed: int,
) -> list[Trajectory]:
    """Generate G single-turn trajectories from one prompt (completion tokens carry action_mask = 1)."""
    return generate_groups(model, processor, [prompt], [group_id], num_generations, settings=settings, seeds=[seed])
