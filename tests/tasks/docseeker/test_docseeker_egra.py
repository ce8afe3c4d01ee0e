"""EGRA: which pages get the high budget, that every page stays within its budget, and that the
processor keeps each page at its budgeted token count (no silent re-resize)."""

from __future__ import annotations

import random

import pytest

from mmreason.media import image_tokens, pdf_page_sizes, pixels_for_tokens, render_pages
from mmreason.media.budget import IMAGE_MIN_PIXELS
from mmreason.taskpack import TASKS
from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.egra import EgraSettings, allocate, high_resolution_pages, token_report

HIGH, LOW = pixels_for_tokens(1024), pixels_for_tokens(256)


def test_training_high_set_is_gold_union_a_seeded_sample():
    # N = 20, gold {3} (1-based) = index 2; S = 5 indices drawn by the seeded generator.
    budgets = allocate(20, [3], "train", EgraSettings(), random.Random(7))
    sample = set(random.Random(7).sample(range(20), 5))
    high = {i for i, b in enumerate(budgets) if b == HIGH}
    assert high == {2} | sample
    assert all(b == LOW for i, b in enumerate(budgets) if i not in high)
    assert budgets == allocate(20, [3], "train", EgraSettings(), random.Random(7))  # reproducible


def test_validation_off_and_no_specific_page():
    assert high_resolution_pages(20, [3, 9], "eval", 5, random.Random(0)) == {2, 8}
    assert high_resolution_pages(20, [-1], "eval", 5, random.Random(0)) == set(range(20))
    assert allocate(20, [3], "train", EgraSettings(use=False), random.Random(0)) == [HIGH] * 20
    assert len(high_resolution_pages(3, [1], "train", 5, random.Random(0))) == 3  # min(k, N) pages


@pytest.fixture(scope="module")
def twenty_pages(tmp_path_factory):
    from mmreason.tasks.docseeker.synth import generate

    folder = tmp_path_factory.mktemp("egra")
    return str(generate(folder, 1, 20, 20, seed=3, page_size=(425, 550)))


def test_transform_redraws_per_step_and_keeps_every_page_within_budget(twenty_pages):
    pack = TASKS.get("docseeker")
    sample = docseeker_load(twenty_pages, "train", egra_high_tokens=64, egra_low_tokens=16)[0]
    gold = {p - 1 for p in sample.meta["evidence_pages"] if p > 0}
    draws = [pack.prepare(sample, split="train", seed=0, step=s) for s in range(4)]
    highs = [{i for i, p in enumerate(d.pages) if p.max_pixels == pixels_for_tokens(64)} for d in draws]
    assert all(gold <= h and len(h - gold) <= 5 for h in highs)
    assert len({frozenset(h) for h in highs}) > 1, "the random pages were not redrawn between steps"
    again = pack.prepare(sample, split="train", seed=0, step=2)
    assert [p.max_pixels for p in again.pages] == [p.max_pixels for p in draws[2].pages]
    for page in draws[0].pages:
        (image,) = render_pages(page.source, [page.index], max_pixels=page.max_pixels)
        assert image.width * image.height <= page.max_pixels


def test_processor_keeps_the_budgeted_token_count(twenty_pages, tiny_model_dir):
    from mmreason.models import load_processor
    from mmreason.rollout.prompts import build_prompt

    high_tokens, low_tokens = 16, 8
    processor = load_processor(tiny_model_dir, max_pixels=pixels_for_tokens(high_tokens))
    pack = TASKS.get("docseeker")
    sample = docseeker_load(twenty_pages, "train", egra_high_tokens=high_tokens, egra_low_tokens=low_tokens)[0]
    drawn = pack.prepare(sample, split="train", seed=0, step=1)
    prompt = build_prompt(processor, drawn, max_prompt_length=4096)
    grid = prompt.visual["image_grid_thw"]  # [pages, 3]
    got = (grid.prod(-1) // 4).tolist()
    sizes = pdf_page_sizes(drawn.pages[0].source)
    want = [image_tokens(h, w, IMAGE_MIN_PIXELS, p.max_pixels) for (h, w), p in zip(sizes, drawn.pages)]
    assert got == want
    assert all(t <= (high_tokens if p.max_pixels == pixels_for_tokens(high_tokens) else low_tokens)
               for t, p in zip(got, drawn.pages))
    assert len(set(got)) == 2  # both budgets are in use, so a re-resize would show


def test_token_report_counts_fewer_tokens_with_egra(tmp_path):
    from mmreason.tasks.docseeker.synth import generate

    # A 40-page document with budgets scaled to its half-size pages (256 / 64 tokens, ratio 4 as 1024 / 256).
    path = generate(tmp_path, 1, 40, 40, seed=5, page_size=(425, 550))
    sample = docseeker_load(str(path), "train")[0]
    report = token_report(sample, EgraSettings(True, 256, 64, 5))
    assert report["pages"] == 40
    assert report["tokens_without_egra"] == sum(image_tokens(h, w, IMAGE_MIN_PIXELS, pixels_for_tokens(256))
                                                for h, w in pdf_page_sizes(sample.pages[0].source))
    if sample.meta["evidence_pages"] != [-1]:
        assert report["reduction_eval"] >= 3.0
    assert report["reduction_train"] > 2.0
