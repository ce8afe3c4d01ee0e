"""All groups of a step in one generate call sample exactly what one call per group samples.

Every row draws from its own seeded stream (row seeds derived from its group's seed), so a group's
rollouts do not depend on the other prompts of the call, their lengths (left padding) or images, the
order of the prompts, or whether each prompt is encoded once and its cache expanded (prefill) or
repeated G times. A negative control (one random stream shared by all rows) shows the comparison
catches row-dependent sampling.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from mmreason.rollout import row_sampling
from mmreason.rollout.generate import GenerationSettings, generate_group, generate_groups, sample_rows
from mmreason.rollout.prompts import build_prompt
from mmreason.rollout.row_sampling import row_seeds
from mmreason.types import Sample

G = 4
# Sampling from the top 8: the paths compared here differ by float rounding (~1e-6 in the logits: padding,
# prefill vs prompt copies), and over the random model's near-uniform 1,024-token distribution that can move an
# inverse-CDF boundary past the drawn number; among 8 candidates it cannot.
SETTINGS = GenerationSettings(max_new_tokens=12, temperature=1.0, top_p=0.95, top_k=8)


def _prompts(processor):
    """Prompts of different lengths: 2 images, no image, 1 small image, 1 tall image with longer text."""
    specs = [((120, 84), 2, 1), (None, 0, 3), ((56, 56), 1, 1), ((28, 200), 1, 4)]
    prompts = []
    for i, (size, n_images, repeat) in enumerate(specs):
        images = [Image.new("RGB", size, (50 * i % 255, 90 + 40 * k, 200)) for k in range(n_images)]
        content = [{"type": "image"}] * n_images + [{"type": "text", "text": " ".join(["Which shape?"] * repeat)}]
        sample = Sample(id=f"p{i}", messages=[{"role": "user", "content": content}], images=images)
        prompts.append(build_prompt(processor, sample, max_prompt_length=2048))
    assert len({p.length for p in prompts}) == len(prompts)  # every prompt is padded differently
    return prompts


def _rows(trajectories):
    return [(t.sample_id, t.group_id, t.token_ids.tolist(), t.completion_text, t.truncated) for t in trajectories]


def _per_group(model, processor, prompts, seeds, settings=SETTINGS):
    return [
        t
        for i, (p, s) in enumerate(zip(prompts, seeds))
        for t in generate_group(model, processor, p, 10 + i, G, settings=settings, seed=s)
    ]


def test_one_batched_call_samples_what_per_group_calls_sample(tiny, one_torch_thread, monkeypatch):
    model, processor = tiny
    monkeypatch.setattr(row_sampling.RowSeededSampling, "block", 5)  # rows draw new blocks of numbers mid-call
    prompts = _prompts(processor)
    seeds = [7, 123456789, 42, 2**40 + 3]
    batched = generate_groups(
        model, processor, prompts, [10 + i for i in range(len(prompts))], G, settings=SETTINGS, seeds=seeds
    )
    alone = _per_group(model, processor, prompts, seeds)
    assert _rows(batched) == _rows(alone)
    # Another order of the prompts in the call: each group still samples the same.
    order = [2, 0, 3, 1]
    shuffled = generate_groups(
        model,
        processor,
        [prompts[i] for i in order],
        [10 + i for i in order],
        G,
        settings=SETTINGS,
        seeds=[seeds[i] for i in order],
    )
    assert sorted(_rows(shuffled)) == sorted(_rows(alone))
    # The prompt repeated G times (no prefill, no cache expansion) samples the same rows too.
    tok = processor.tokenizer
    copies = sample_rows(
        model,
        tok,
        [p for p in prompts for _ in range(G)],
        1,
        SETTINGS,
        seeds=[r for s in seeds for r in row_seeds(s, G)],
    )
    for row, t in zip(copies, batched):
        assert row[: t.completion_length].tolist() == t.token_ids[t.prompt_length :].tolist()
    # It really sampled: rows of a group differ, and other seeds give other rollouts.
    texts = [t.completion_text for t in batched]
    assert all(len(set(texts[g * G : (g + 1) * G])) > 1 for g in range(len(prompts)))
    other = generate_groups(
        model, processor, prompts, list(range(len(prompts))), G, settings=SETTINGS, seeds=[s + 1 for s in seeds]
    )
    assert [t.completion_text for t in other] != texts


def test_batched_greedy_and_top_k_equal_per_group(tiny, one_torch_thread):
    model, processor = tiny
    prompts = _prompts(processor)[:3]
    for settings in (
        GenerationSettings(max_new_tokens=8, temperature=0.0),
        GenerationSettings(max_new_tokens=8, temperature=0.7, top_k=5),
    ):
        batched = generate_groups(model, processor, prompts, [10, 11, 12], G, settings=settings, seeds=[1, 2, 3])
        assert _rows(batched) == _rows(_per_group(model, processor, prompts, [1, 2, 3], settings))


def _video_prompt(processor, sample_id: str, frames: int, fps: float, text: str):
    """A prompt with one video of ``frames`` frames taken at ``fps`` (its own temporal M-RoPE step)."""
    from mmreason.rollout.prompts import VISUAL_KEYS, PromptInputs, encode, render_chat

    pixels = (torch.rand(frames, 3, 56, 56, generator=torch.Generator().manual_seed(frames)) * 255).to(torch.uint8)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]}]
    chat = render_chat(processor, messages)
    out = encode(
        processor,
        chat,
        [],
        [pixels],
        [{"total_num_frames": frames * 2, "fps": fps, "frames_indices": list(range(0, frames * 2, 2))}],
    )
    return PromptInputs(
        Sample(id=sample_id, messages=messages),
        out["input_ids"][0],
        out["mm_token_type_ids"][0].long(),
        {k: out[k] for k in VISUAL_KEYS if k in out},
        chat,
    )


def test_videos_and_text_only_batches_equal_per_group(tiny, one_torch_thread):
    """Videos of different lengths and frame rates (second_per_grid_ts) beside an image; and a batch of
    text-only prompts of different lengths, whose left pads the positions must skip."""
    model, processor = tiny
    videos = [
        _video_prompt(processor, "v0", 4, 4.0, "What moves?"),
        _prompts(processor)[2],
        _video_prompt(processor, "v1", 6, 1.0, "Which way does it move, and how fast?"),
    ]
    assert videos[0].visual["second_per_grid_ts"].tolist() != videos[2].visual["second_per_grid_ts"].tolist()
    texts = []
    for i, words in enumerate(("Two plus two?", "Name a colour that is often used for warning signs, please.")):
        messages = [{"role": "user", "content": [{"type": "text", "text": words}]}]
        texts.append(build_prompt(processor, Sample(id=f"t{i}", messages=messages), max_prompt_length=512))
    for prompts in (videos, texts):
        seeds = list(range(31, 31 + len(prompts)))
        batched = generate_groups(
            model, processor, prompts, [10 + i for i in range(len(prompts))], G, settings=SETTINGS, seeds=seeds
        )
        assert _rows(batched) == _rows(_per_group(model, processor, prompts, seeds))


def test_negative_control_a_shared_stream_makes_sampling_depend_on_the_batch(tiny, one_torch_thread, monkeypatch):
    """One generator for all rows (what a batch-level seed amounts to): the comparison above fails."""
    model, processor = tiny
    prompts = _prompts(processor)[:3]

    def shared_stream(self):
        return torch.rand(len(self.generators), generator=self.generators[0], dtype=torch.float64)

    monkeypatch.setattr(row_sampling.RowSeededSampling, "uniforms", shared_stream)
    batched = generate_groups(model, processor, prompts, [10, 11, 12], G, settings=SETTINGS, seeds=[5, 6, 7])
    alone = _per_group(model, processor, prompts, [5, 6, 7])
    assert _rows(batched) != _rows(alone)


def test_row_seeds_are_distinct_and_stable():
    seeds = row_seeds(3, 8)
    assert len(set(seeds)) == 8 and row_seeds(3, 8) == seeds and row_seeds(3, 4) == seeds[:4]
    assert set(row_seeds(4, 8)).isdisjoint(seeds)


def test_inverse_cdf_draw_never_picks_a_zero_probability_token():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]]).repeat(5, 1)
    u = torch.tensor([0.0, 0.25, 0.5, 0.999999, 1.0 - 1e-16], dtype=torch.float64)
    assert row_sampling.inverse_cdf_draw(probs, u).tolist() == [1, 1, 3, 3, 3]


def test_seed_count_must_match_the_rows(tiny):
    model, processor = tiny
    prompt = _prompts(processor)[1]
    with pytest.raises(ValueError, match="2 seeds for 1 prompts x 3 rows"):
        sample_rows(model, processor.tokenizer, [prompt], 3, SETTINGS, seeds=[1, 2])
