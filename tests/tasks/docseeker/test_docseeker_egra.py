"""EGRA: which pages get the high budget, that every page stays within its budget, that the
processor keeps each page at its budgeted token count (no silent re-resize), and that evaluation's
default allocation (one budget for every page, fitted to max_prompt_length) ignores the gold pages."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

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
    assert all(
        t <= (high_tokens if p.max_pixels == pixels_for_tokens(high_tokens) else low_tokens)
        for t, p in zip(got, drawn.pages)
    )
    assert len(set(got)) == 2  # both budgets are in use, so a re-resize would show


def test_token_report_counts_fewer_tokens_with_egra(tmp_path):
    from mmreason.tasks.docseeker.synth import generate

    # A 40-page document with budgets scaled to its half-size pages (256 / 64 tokens, ratio 4 as 1024 / 256).
    path = generate(tmp_path, 1, 40, 40, seed=5, page_size=(425, 550))
    sample = docseeker_load(str(path), "train")[0]
    report = token_report(sample, EgraSettings(True, 256, 64, 5))
    assert report["pages"] == 40
    assert report["tokens_without_egra"] == sum(
        image_tokens(h, w, IMAGE_MIN_PIXELS, pixels_for_tokens(256)) for h, w in pdf_page_sizes(sample.pages[0].source)
    )
    if sample.meta["evidence_pages"] != [-1]:
        assert report["reduction_eval"] >= 3.0
    assert report["reduction_train"] > 2.0


# ---- evaluation: the default allocation does not depend on the gold pages ------------------------


def _same_document_two_golds(tmp_path, data: str) -> str:
    """A data file with one document twice: the same question, evidence on page 1 or on page 3."""
    row = json.loads(open(data).readline())
    row["document"] = str(Path(data).parent / row["document"])
    rows = [
        {**row, "id": "gold-1", "evidence_pages": [1], "evidence_base": 1},
        {**row, "id": "gold-3", "evidence_pages": [3], "evidence_base": 1},
    ]
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def six_pages(tmp_path_factory):
    from mmreason.tasks.docseeker.synth import generate

    return str(generate(tmp_path_factory.mktemp("egra6"), 1, 6, 6, seed=2, page_size=(170, 220)))


def test_eval_prompt_is_the_same_whichever_page_is_gold(six_pages, tmp_path, tiny_model_dir):
    from mmreason.eval.tasks import load_task
    from mmreason.models import load_processor
    from mmreason.rollout.prompts import build_prompt

    processor = load_processor(tiny_model_dir, max_pixels=pixels_for_tokens(64))
    path = _same_document_two_golds(tmp_path, six_pages)
    task = load_task("docseeker", path, options={"egra_high_tokens": 64, "egra_low_tokens": 16}, max_prompt_length=4096)
    one, three = task.samples
    assert [p.max_pixels for p in one.pages] == [p.max_pixels for p in three.pages]
    a, b = (build_prompt(processor, s, max_prompt_length=4096) for s in (one, three))
    assert torch.equal(a.input_ids, b.input_ids)
    assert torch.equal(a.visual["image_grid_thw"], b.visual["image_grid_thw"])
    assert torch.equal(a.visual["pixel_values"], b.visual["pixel_values"])
    assert task.describe()["page_allocation"]["mode"] == "uniform"


def test_gold_option_still_sharpens_the_gold_page(six_pages, tmp_path):
    path = _same_document_two_golds(tmp_path, six_pages)
    one, three = docseeker_load(path, "eval", egra_high_tokens=64, egra_low_tokens=16, egra_eval="gold")
    high, low = pixels_for_tokens(64), pixels_for_tokens(16)
    assert [p.max_pixels for p in one.pages] == [high, low, low, low, low, low]
    assert [p.max_pixels for p in three.pages] == [low, low, high, low, low, low]
    assert one.meta["page_allocation"]["mode"] == "gold_pages" and one.meta["page_allocation"]["gold"]
    with pytest.raises(ValueError, match="egra_eval"):
        docseeker_load(path, "eval", egra_eval="gold_pages_typo")


def test_uniform_budget_is_the_largest_that_fits(twenty_pages, tiny_model_dir):
    from mmreason.models import load_processor
    from mmreason.rollout.prompts import build_prompt
    from mmreason.tasks.docseeker.egra import TEMPLATE_TOKENS, settings_of, text_token_bound, uniform_tokens

    limit = 1500  # 20 half-size pages: below 20 x 64 visual tokens + the text, so the fit has to shrink them
    processor = load_processor(tiny_model_dir, max_pixels=pixels_for_tokens(64))
    (sample,) = docseeker_load(
        twenty_pages,
        "eval",
        egra_high_tokens=64,
        egra_low_tokens=16,
        max_prompt_length=limit,
        tokenizer=processor.tokenizer,
    )
    budgets = {p.max_pixels for p in sample.pages}
    assert len(budgets) == 1
    tokens = uniform_tokens(sample, settings_of(sample))
    assert budgets == {pixels_for_tokens(tokens)} and 16 < tokens < 64
    sizes = pdf_page_sizes(sample.pages[0].source)

    def visual(t):
        return sum(image_tokens(h, w, IMAGE_MIN_PIXELS, pixels_for_tokens(t)) for h, w in sizes)

    room = limit - text_token_bound(sample)
    assert visual(tokens) <= room < visual(tokens + 1)  # the largest budget that fits
    prompt = build_prompt(processor, sample, max_prompt_length=limit)  # raises PromptTooLong if it does not fit
    assert prompt.visual_tokens == visual(tokens)
    text = prompt.length - prompt.visual_tokens  # the text was counted with the tokenizer: a tight bound
    assert text <= text_token_bound(sample) <= text + TEMPLATE_TOKENS
    # Without a limit (a loader called directly), every page gets the high budget; training is unchanged.
    (free,) = docseeker_load(twenty_pages, "eval", egra_high_tokens=64, egra_low_tokens=16)
    assert {p.max_pixels for p in free.pages} == {pixels_for_tokens(64)}


def test_results_json_names_the_allocation_and_flags_gold(six_pages, tiny_model_dir, tmp_path, one_torch_thread):
    from mmreason.cli import main

    def run(name: str, *task_args: str) -> tuple[dict, str]:
        out = tmp_path / name
        assert (
            main(
                [
                    "eval",
                    "--model",
                    str(tiny_model_dir),
                    "--tasks",
                    f"docseeker:{six_pages}",
                    "--output_path",
                    str(out),
                    "--gen_kwargs",
                    "max_new_tokens=2",
                    "--device",
                    "cpu",
                    "--model_args",
                    "max_prompt_length=2000",
                    "--task_args",
                    ",".join(["egra_high_tokens=64", "egra_low_tokens=16", *task_args]),
                ]
            )
            == 0
        )
        (results,) = out.rglob("*_results.json")
        (table,) = out.rglob("*_results.md")
        return json.loads(results.read_text()), table.read_text()

    results, table = run("uniform")
    (config,) = results["configs"].values()
    assert config["page_allocation"] == {
        "mode": "uniform",
        "gold": False,
        "max_tokens_per_page": 64,
        "fitted_to_max_prompt_length": 2000,
    }
    assert "gold" not in table.split("|")[0]
    results, table = run("gold", "egra_eval=gold")
    (config,) = results["configs"].values()
    assert config["page_allocation"]["mode"] == "gold_pages" and config["page_allocation"]["gold"] is True
    assert results["config"]["task_args"]["egra_eval"] == "gold"
    header = table.split("| Task")[0]
    assert "gold evidence pages" in header and "docseeker" in header
