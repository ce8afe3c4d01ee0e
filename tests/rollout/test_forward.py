"""Per-token log-probs of a sample are the same alone and inside a padded batch of other samples."""

from __future__ import annotations

import torch
from PIL import Image
from rollout_helpers import sample_tokens

from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import (
    GenerationSettings,
    generate_group,
    sample_rows,
)
from mmreason.rollout.prompts import PromptTooLong, build_prompt
from mmreason.rollout.row_sampling import row_seeds
from mmreason.types import Sample


def _sample(i: int, size: tuple[int, int], colour: str, n_images: int = 1) -> Sample:
    images = [Image.new("RGB", size, colour) for _ in range(n_images)]
    content = [{"type": "image"}] * n_images + [{"type": "text", "text": f"What colour is item {i}?"}]
    return Sample(id=f"s{i}", messages=[{"role": "user", "content": content}], answer=colour, images=images)


def test_logprobs_alone_equal_logprobs_in_a_padded_batch(tiny):
    model, processor = tiny
    samples = [_sample(0, (60, 90), "red"), _sample(1, (200, 120), "blue", 2), _sample(2, (28, 300), "green")]
    settings = GenerationSettings(max_new_tokens=6)
    trajs = []
    for i, s in enumerate(samples):
        prompt = build_prompt(processor, s, max_prompt_length=1024)
        trajs += generate_group(model, processor, prompt, i, 2, settings=settings, seed=i)
    pad = processor.tokenizer.pad_token_id
    with torch.no_grad():
        batched, _ = token_logprobs(model, collate(trajs, pad))
        for row, t in enumerate(trajs):
            alone, _ = token_logprobs(model, collate([t], pad))
            n = t.token_ids.numel()
            mask = t.action_mask.bool()
            assert mask.sum() > 0
            torch.testing.assert_close(batched[row, :n][mask], alone[0][mask], atol=1e-5, rtol=0)


def test_group_shares_prompt_and_masks_only_completion(tiny):
    model, processor = tiny
    prompt = build_prompt(processor, _sample(0, (64, 64), "red"), max_prompt_length=1024)
    trajs = generate_group(model, processor, prompt, 7, 4, settings=GenerationSettings(max_new_tokens=5), seed=3)
    assert len(trajs) == 4
    for t in trajs:
        assert torch.equal(t.token_ids[: prompt.length], prompt.input_ids)
        assert t.action_mask[: prompt.length].sum() == 0
        assert t.action_mask[prompt.length :].all()
        assert t.visual[0] is prompt.visual  # shared, not copied
        assert t.group_id == 7


def test_same_seed_same_group_regardless_of_global_rng(tiny):
    model, processor = tiny
    prompt = build_prompt(processor, _sample(0, (64, 64), "red"), max_prompt_length=1024)
    settings = GenerationSettings(max_new_tokens=6)
    a = generate_group(model, processor, prompt, 0, 3, settings=settings, seed=11)
    torch.manual_seed(12345)
    b = generate_group(model, processor, prompt, 0, 3, settings=settings, seed=11)
    assert [t.token_ids.tolist() for t in a] == [t.token_ids.tolist() for t in b]


def test_vision_special_tokens_are_never_sampled(tiny):
    model, processor = tiny
    tok = processor.tokenizer
    banned = {tok.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>")}
    prompt = build_prompt(processor, _sample(0, (64, 64), "red"), max_prompt_length=1024)
    # A high temperature flattens the distribution so that every token would be drawn sometimes.
    settings = GenerationSettings(max_new_tokens=64, temperature=50.0)
    trajs = generate_group(model, processor, prompt, 0, 16, settings=settings, seed=0)
    sampled = {int(x) for t in trajs for x in t.token_ids[prompt.length :]}
    assert len(sampled) > 100  # the flattened policy did explore the vocabulary
    assert not sampled & banned


def test_long_prompt_is_filtered_not_truncated(tiny):
    _, processor = tiny
    sample = _sample(0, (400, 400), "red", n_images=3)
    try:
        build_prompt(processor, sample, max_prompt_length=50)
    except PromptTooLong as exc:
        assert "s0" in str(exc) and "max_prompt_length" in str(exc)
    else:
        raise AssertionError("an over-long prompt must be filtered")
    # With downscaling it fits, and its visual spans are whole (pads == grid tokens).
    prompt = build_prompt(processor, sample, max_prompt_length=80, overflow="downscale")
    grid = prompt.visual["image_grid_thw"]
    assert prompt.visual_tokens == int((grid.prod(-1) // 4).sum())
    assert prompt.length <= 80


def test_shared_prefill_samples_exactly_what_prompt_copies_sample(tiny):
    """The group path (prompt encoded once, cache expanded) draws the same tokens as n prompt copies, each
    copy sampled alone with its row's seed, and as n copies in one batch without the prefill."""
    model, processor = tiny
    tok = processor.tokenizer
    prompt = build_prompt(processor, _sample(0, (120, 200), "blue", n_images=3), max_prompt_length=2048)
    settings = GenerationSettings(max_new_tokens=24)
    grouped = sample_tokens(model, tok, prompt.input_ids, prompt.mm_token_type_ids, prompt.visual, 6, settings, seed=9)
    copies = sample_rows(model, tok, [prompt] * 6, 1, settings, seeds=row_seeds(9, 6))  # n = 1: no prefill
    assert grouped.shape == copies.shape
    assert torch.equal(grouped, copies)
    for r, seed in enumerate(row_seeds(9, 6)):
        (alone,) = sample_rows(model, tok, [prompt], 1, settings, seeds=[seed])
        assert torch.equal(alone, grouped[r, : alone.numel()])
    assert len({tuple(row.tolist()) for row in grouped}) == 6  # six different samples
