"""Batched generation: a doc's output does not depend on the docs padded into its batch."""

from __future__ import annotations

import torch
from PIL import Image
from rollout_helpers import sample_tokens

from mmreason.eval.generate import generate_batch
from mmreason.rollout.generate import (
    GenerationSettings,
    collate_left,
    cut_at_eos,
    eos_token_ids,
)
from mmreason.rollout.prompts import build_prompt
from mmreason.rollout.row_sampling import RowSeededSampling
from mmreason.types import Sample


def _prompts(processor):
    """Prompts of very different lengths: 0, 1 and 2 images of different sizes, short and long text."""
    specs = [((60, 90), 1, 1), ((200, 120), 2, 3), ((28, 300), 1, 1), (None, 0, 6), ((64, 64), 1, 2), ((150, 40), 1, 4)]
    prompts = []
    for i, (size, n_images, repeat) in enumerate(specs):
        images = [Image.new("RGB", size, (40 * i % 255, 120, 30 + 20 * k)) for k in range(n_images)]
        text = " ".join(["What colour is the shape in the picture?"] * repeat)
        content = [{"type": "image"}] * n_images + [{"type": "text", "text": text}]
        sample = Sample(id=f"d{i}", messages=[{"role": "user", "content": content}], images=images)
        prompts.append(build_prompt(processor, sample, max_prompt_length=4096))
    assert len({p.length for p in prompts}) == len(prompts)  # every row of the batch is padded differently
    return prompts


def test_left_padding_layout(tiny):
    _, processor = tiny
    prompts = _prompts(processor)[:3]
    pad = processor.tokenizer.pad_token_id
    batch = collate_left(prompts, pad)
    width = max(p.length for p in prompts)
    for i, p in enumerate(prompts):
        assert torch.equal(batch["input_ids"][i, width - p.length :], p.input_ids)
        assert batch["attention_mask"][i].sum() == p.length and batch["attention_mask"][i, -1] == 1
        assert (batch["mm_token_type_ids"][i, : width - p.length] == 0).all()
    grids = torch.cat([p.visual["image_grid_thw"] for p in prompts])
    assert torch.equal(batch["image_grid_thw"], grids)  # visual tensors in batch order


def test_batched_greedy_equals_each_doc_alone(tiny):
    model, processor = tiny
    prompts = _prompts(processor)
    settings = GenerationSettings(max_new_tokens=12, temperature=0.0)
    batched = generate_batch(model, processor, prompts, settings)
    tok = processor.tokenizer
    for p, got in zip(prompts, batched):
        alone = generate_batch(model, processor, [p], settings)[0]
        assert got.token_ids.tolist() == alone.token_ids.tolist()
        assert got.text == alone.text and got.truncated == alone.truncated
        # And equal to the unpadded single-prompt path the trainer uses.
        raw = sample_tokens(model, tok, p.input_ids, p.mm_token_type_ids, p.visual, 1, settings, seed=0)[0]
        reference, _ = cut_at_eos(raw, eos_token_ids(tok), tok.pad_token_id)
        assert got.token_ids.tolist() == reference.tolist()
    assert len({c.text for c in batched}) > 1  # the docs did get different answers


def test_sampling_is_seeded_per_doc_not_per_batch(tiny):
    model, processor = tiny
    prompts = _prompts(processor)
    settings = GenerationSettings(max_new_tokens=10, temperature=1.0, top_p=0.95)
    seeds = [101 + i for i in range(len(prompts))]
    together = generate_batch(model, processor, prompts, settings, seeds)
    reordered = generate_batch(model, processor, prompts[::-1], settings, seeds[::-1])[::-1]
    alone = [generate_batch(model, processor, [p], settings, [s])[0] for p, s in zip(prompts, seeds)]
    for a, b, c in zip(together, reordered, alone):
        assert a.token_ids.tolist() == b.token_ids.tolist() == c.token_ids.tolist()
    other = generate_batch(model, processor, prompts, settings, [s + 1000 for s in seeds])
    assert [c.text for c in other] != [c.text for c in together]
    greedy = generate_batch(model, processor, prompts, GenerationSettings(max_new_tokens=10, temperature=0.0))
    assert [c.text for c in greedy] != [c.text for c in together]  # it really sampled


def test_row_sampler_respects_top_k_top_p_and_masked_tokens():
    # Row 0 probabilities [0.6, 0.3, 0.1, 0]: token 3 is suppressed (-inf) and must never be drawn.
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.1, 0.0]])).repeat(400, 1)  # [N, V]

    def draws(**kw):
        proc = RowSeededSampling(list(range(400)), GenerationSettings(1, temperature=1.0, **kw))
        out = proc(None, logits)
        assert ((out == 0).sum(-1) == 1).all()  # one-hot: greedy then takes the drawn token
        return out.argmax(-1)

    free = draws()
    assert set(free.tolist()) == {0, 1, 2}
    assert abs((free == 0).float().mean().item() - 0.6) < 0.1
    assert set(draws(top_k=1).tolist()) == {0}
    assert set(draws(top_p=0.5).tolist()) == {0}  # 0.6 >= 0.5: the first token alone
    assert set(draws(top_p=0.8).tolist()) == {0, 1}  # 0.6 < 0.8 <= 0.9: two tokens
    again = draws()
    assert torch.equal(free, again)  # same seeds, same draws
