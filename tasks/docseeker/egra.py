"""EGRA, Evidence-Guided Resolution Allocation: sharp evidence pages, cheap other pages.

Budgets are in merged visual tokens (28 x 28 px each, Qwen2.5-VL): a page gets ``max_pixels =
tokens * 784`` (``mmreason.media.pixels_for_tokens``) and is rendered at ``smart_resize`` of that
budget, so the processor keeps it as it is (the run's ``data.max_pixels`` must be >= the high budget,
else the processor shrinks the sharp pages again).

    training:   high = gold U S,  S = a uniform sample of min(k, N) of the N pages, redrawn on every
                draw (the pack's ``transform`` gets a generator seeded by (run seed, step, sample id));
                S stops the policy from learning "the sharp page is the evidence page".
    otherwise:  high = gold; all pages when gold is [-1] ("no specific evidence page").
    off:        every page at the high budget.

Defaults: high 1024 tokens, low 256, k = 5. Source: DocSeeker ``EviGRPO/verl/utils/dataset/rl_dataset.py``
(``update_image_list``, ``post_process_image``); ALGORITHMS.md section 1. As there, S may overlap gold,
and in training a [-1] sample gets only S at the high budget.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from mmreason.media import image_tokens, pdf_page_sizes, pixels_for_tokens
from mmreason.media.budget import IMAGE_MIN_PIXELS
from mmreason.types import Sample

TRAIN_SPLIT = "train"


@dataclass(frozen=True)
class EgraSettings:
    """The allocation of one run (the pack's task_args ``use_egra``, ``egra_k``, ``egra_*_tokens``)."""

    use: bool = True
    high_tokens: int = 1024
    low_tokens: int = 256
    k: int = 5

    def __post_init__(self):
        if not 0 < self.low_tokens <= self.high_tokens:
            raise ValueError(f"EGRA needs 0 < egra_low_tokens <= egra_high_tokens, got {self.low_tokens} and "
                             f"{self.high_tokens}")
        if self.k < 0:
            raise ValueError(f"egra_k must be >= 0, got {self.k}")

    @property
    def high_pixels(self) -> int:
        return pixels_for_tokens(self.high_tokens)

    @property
    def low_pixels(self) -> int:
        return pixels_for_tokens(self.low_tokens)


def high_resolution_pages(num_pages: int, gold: list[int], split: str, k: int, rng: random.Random) -> set[int]:
    """0-based indices of the pages that get the high budget (``gold``: 1-based, or [-1])."""
    gold0 = {p - 1 for p in gold if 1 <= p <= num_pages}
    if split == TRAIN_SPLIT:
        return gold0 | set(rng.sample(range(num_pages), min(k, num_pages)))
    return gold0 if gold0 else set(range(num_pages))


def allocate(num_pages: int, gold: list[int], split: str, settings: EgraSettings,
             rng: random.Random) -> list[int]:
    """``max_pixels`` of each page, in page order."""
    if not settings.use:
        return [settings.high_pixels] * num_pages
    high = high_resolution_pages(num_pages, gold, split, settings.k, rng)
    return [settings.high_pixels if i in high else settings.low_pixels for i in range(num_pages)]


def settings_of(sample: Sample) -> EgraSettings | None:
    """The EGRA settings the loader stored on the sample (None: leave the pages' budgets alone)."""
    raw = sample.meta.get("egra")
    return EgraSettings(**raw) if raw else None


def docseeker_transform(sample: Sample, *, split: str, rng: random.Random) -> Sample:
    """The pack's per-draw hook: a copy of ``sample`` whose pages carry their EGRA ``max_pixels``."""
    settings = settings_of(sample)
    if settings is None or not sample.pages:
        return sample
    budgets = allocate(len(sample.pages), list(sample.meta.get("evidence_pages", [])), split, settings, rng)
    pages = [dataclasses.replace(p, max_pixels=b) for p, b in zip(sample.pages, budgets)]
    return dataclasses.replace(sample, pages=pages)


# ---- the visual-token report --------------------------------------------------------------------


def page_tokens(sample: Sample, budgets: list[int], dpi: float = 100) -> list[int]:
    """Visual tokens of each page under its budget, from the page sizes alone (nothing is rendered)."""
    sizes: list[tuple[int, int]] = []
    by_source: dict[str, list[int]] = {}
    for page in sample.pages:
        by_source.setdefault(page.source, []).append(page.index)
    known = {src: dict(zip(idx, pdf_page_sizes(src, idx, dpi))) for src, idx in by_source.items()}
    sizes = [known[p.source][p.index] for p in sample.pages]
    return [image_tokens(h, w, IMAGE_MIN_PIXELS, b) for (h, w), b in zip(sizes, budgets)]


def token_report(sample: Sample, settings: EgraSettings, seed: int = 0, draws: int = 8) -> dict:
    """Visual tokens of one document without EGRA, with EGRA at validation (gold pages sharp) and in
    training (the mean over ``draws`` seeded draws of S), and the reduction factors."""
    n, gold = len(sample.pages), list(sample.meta.get("evidence_pages", []))
    rng = random.Random(f"{seed}/{sample.id}")
    without = sum(page_tokens(sample, allocate(n, gold, "eval", dataclasses.replace(settings, use=False), rng)))
    val = sum(page_tokens(sample, allocate(n, gold, "eval", settings, rng)))
    train = [sum(page_tokens(sample, allocate(n, gold, TRAIN_SPLIT, settings, rng))) for _ in range(draws)]
    train_mean = sum(train) / len(train)
    return {"id": sample.id, "pages": n, "tokens_without_egra": without, "tokens_egra_eval": val,
            "tokens_egra_train": train_mean, "reduction_eval": without / val, "reduction_train": without / train_mean}
