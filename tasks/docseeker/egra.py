"""EGRA, Evidence-Guided Resolution Allocation: sharp evidence pages, cheap other pages.

Budgets are in merged visual tokens (28 x 28 px each, Qwen2.5-VL): a page gets ``max_pixels =
tokens * 784`` (``mmreason.media.pixels_for_tokens``) and is rendered at ``smart_resize`` of that
budget, so the processor keeps it as it is (the run's ``data.max_pixels`` must be >= the high budget,
else the processor shrinks the sharp pages again).

    training:   high = gold U S,  S = a uniform sample of min(k, N) of the N pages, redrawn on every
                draw (the pack's ``transform`` gets a generator seeded by (run seed, step, sample id));
                S stops the policy from learning "the sharp page is the evidence page".
    sft:        high = gold (the paper's SFT); all pages when gold is [-1].
    evaluation  (any other split: ``mmreason eval``, the in-training eval), by ``egra_eval``:
      uniform   (default) one budget for every page, whatever the gold pages: the largest per-page
                budget (at most the high one) under which the whole prompt fits ``max_prompt_length``
                (the run's, handed to the loader by the harness with the model's tokenizer; without a
                limit, the high budget). The text is counted with that tokenizer (else at its UTF-8 byte
                length, an upper bound for a byte-level BPE), plus a 64-token chat-template allowance.
      gold      the paper's validation: high = gold (all pages when gold is [-1]). The resolution then
                tells the model where the evidence is, so its scores are not a test of finding it;
                ``mmreason eval`` records the choice in results.json and flags it in the table header.
    off:        every page at the high budget (``use_egra: false``, every split).

Defaults: high 1024 tokens, low 256, k = 5. Source: DocSeeker ``EviGRPO/verl/utils/dataset/rl_dataset.py``
(``update_image_list``, ``post_process_image``); docs/methods/packs.md#docseeker. As there, S may overlap gold,
and in training a [-1] sample gets only S at the high budget.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from mmreason.media import image_size, image_tokens, pdf_page_sizes, pixels_for_tokens
from mmreason.media.budget import IMAGE_MIN_PIXELS
from mmreason.types import Sample

TRAIN_SPLIT = "train"
SFT_SPLIT = "sft"
EVAL_ALLOCATIONS = ("uniform", "gold")  # egra_eval: how evaluation splits allocate page budgets
MIN_PAGE_TOKENS = 4  # the smallest uniform budget the fit goes down to (a prompt still over is a failure)
TEMPLATE_TOKENS = 64  # chat template (system prompt, role markers) allowance of the uniform fit


@dataclass(frozen=True)
class EgraSettings:
    """The allocation of one run (the pack's task_args ``use_egra``, ``egra_k``, ``egra_*_tokens``)."""

    use: bool = True
    high_tokens: int = 1024
    low_tokens: int = 256
    k: int = 5
    eval_allocation: str = "uniform"  # uniform | gold (``egra_eval``)
    max_prompt_length: int | None = None  # the uniform fit's limit (text + visual tokens)

    def __post_init__(self):
        if self.eval_allocation not in EVAL_ALLOCATIONS:
            raise ValueError(f"egra_eval must be one of {', '.join(EVAL_ALLOCATIONS)}, got {self.eval_allocation!r}")
        if not 0 < self.low_tokens <= self.high_tokens:
            raise ValueError(
                f"EGRA needs 0 < egra_low_tokens <= egra_high_tokens, got {self.low_tokens} and {self.high_tokens}"
            )
        if self.k < 0:
            raise ValueError(f"egra_k must be >= 0, got {self.k}")

    @property
    def high_pixels(self) -> int:
        return pixels_for_tokens(self.high_tokens)

    @property
    def low_pixels(self) -> int:
        return pixels_for_tokens(self.low_tokens)


def is_evaluation(split: str) -> bool:
    return split not in (TRAIN_SPLIT, SFT_SPLIT)


def high_resolution_pages(num_pages: int, gold: list[int], split: str, k: int, rng: random.Random) -> set[int]:
    """0-based indices of the pages that get the high budget under the paper's rule (``gold``: 1-based,
    or [-1]): gold U S in training, gold otherwise (the ``gold`` evaluation variant)."""
    gold0 = {p - 1 for p in gold if 1 <= p <= num_pages}
    if split == TRAIN_SPLIT:
        return gold0 | set(rng.sample(range(num_pages), min(k, num_pages)))
    return gold0 if gold0 else set(range(num_pages))


def allocate(num_pages: int, gold: list[int], split: str, settings: EgraSettings, rng: random.Random) -> list[int]:
    """``max_pixels`` of each page, in page order, under the paper's rule (gold pages sharp outside
    training). The default evaluation allocation is ``docseeker_transform``'s uniform fit instead."""
    if not settings.use:
        return [settings.high_pixels] * num_pages
    high = high_resolution_pages(num_pages, gold, split, settings.k, rng)
    return [settings.high_pixels if i in high else settings.low_pixels for i in range(num_pages)]


def page_sizes(sample: Sample, dpi: float = 100) -> list[tuple[int, int]]:
    """(height, width) of each page as rendered (PDF pages at ``dpi``) or stored (page images)."""
    by_source: dict[str, list[int]] = {}
    for page in sample.pages:
        if str(page.source).lower().endswith(".pdf"):
            by_source.setdefault(page.source, []).append(page.index)
    known = {src: dict(zip(idx, pdf_page_sizes(src, idx, dpi))) for src, idx in by_source.items()}
    sizes = []
    for page in sample.pages:
        if page.source in known:
            sizes.append(known[page.source][page.index])
        else:
            sizes.append(image_size(page.source))
    return sizes


def text_items(sample: Sample) -> list[str]:
    """The text pieces of the sample's messages (page labels, question, instruction)."""
    out: list[str] = []
    for message in sample.messages:
        content = message.get("content")
        out += [content] if isinstance(content, str) else [str(i.get("text") or "") for i in content or []]
    return out


def text_token_bound(sample: Sample) -> int:
    """The prompt's text tokens, over-counted: each text piece's token count as the loader measured it with
    the model's tokenizer (``meta["text_tokens"]``), else its UTF-8 byte length (a byte-level BPE token
    covers at least one byte); plus two vision markers per page and the chat template's allowance."""
    counted = sample.meta.get("text_tokens")
    text = counted if counted is not None else sum(len(t.encode("utf-8")) for t in text_items(sample))
    return int(text) + 2 * len(sample.pages) + TEMPLATE_TOKENS


def uniform_tokens(sample: Sample, settings: EgraSettings) -> int:
    """The largest per-page budget T (merged tokens, at most the high budget) such that the text bound plus
    every page's visual tokens at T fit ``settings.max_prompt_length``; the high budget without a limit."""
    if settings.max_prompt_length is None:
        return settings.high_tokens
    sizes = page_sizes(sample)
    room = settings.max_prompt_length - text_token_bound(sample)

    def cost(t: int) -> int:
        return sum(image_tokens(h, w, IMAGE_MIN_PIXELS, pixels_for_tokens(t)) for h, w in sizes)

    lo, hi = MIN_PAGE_TOKENS, settings.high_tokens  # visual tokens grow with the budget: bisect
    if cost(hi) <= room:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if cost(mid) <= room else (lo, mid - 1)
    return lo


def describe_allocation(settings: EgraSettings) -> dict:
    """The evaluation allocation as results.json records it (``gold: true`` flags the table header)."""
    if not settings.use:
        return {"mode": "off", "gold": False, "tokens_per_page": settings.high_tokens}
    if settings.eval_allocation == "gold":
        return {
            "mode": "gold_pages",
            "gold": True,
            "high_tokens": settings.high_tokens,
            "low_tokens": settings.low_tokens,
            "note": "gold evidence pages at the high budget: the resolution shows where the evidence is",
        }
    return {
        "mode": "uniform",
        "gold": False,
        "max_tokens_per_page": settings.high_tokens,
        "fitted_to_max_prompt_length": settings.max_prompt_length,
    }


def settings_of(sample: Sample) -> EgraSettings | None:
    """The EGRA settings the loader stored on the sample (None: leave the pages' budgets alone)."""
    raw = sample.meta.get("egra")
    return EgraSettings(**raw) if raw else None


def gold_positions(sample: Sample) -> list[int]:
    """The gold evidence as 1-based positions among the sample's pages: the page numbers themselves, or,
    when page retrieval kept some pages (``meta["page_numbers"]``), where the kept gold pages stand."""
    gold = list(sample.meta.get("evidence_pages", []))
    numbers = sample.meta.get("page_numbers")
    if not numbers or gold == [-1]:
        return gold
    return [numbers.index(p) + 1 for p in gold if p in numbers]


def docseeker_transform(sample: Sample, *, split: str, rng: random.Random) -> Sample:
    """The pack's per-draw hook: a copy of ``sample`` whose pages carry their EGRA ``max_pixels``."""
    settings = settings_of(sample)
    if settings is None or not sample.pages:
        return sample
    if settings.use and is_evaluation(split) and settings.eval_allocation == "uniform":
        budgets = [pixels_for_tokens(uniform_tokens(sample, settings))] * len(sample.pages)
    else:
        budgets = allocate(len(sample.pages), gold_positions(sample), split, settings, rng)
    pages = [dataclasses.replace(p, max_pixels=b) for p, b in zip(sample.pages, budgets)]
    return dataclasses.replace(sample, pages=pages)


# ---- the visual-token report --------------------------------------------------------------------


def page_tokens(sample: Sample, budgets: list[int], dpi: float = 100) -> list[int]:
    """Visual tokens of each page under its budget, from the page sizes alone (nothing is rendered)."""
    sizes = page_sizes(sample, dpi)
    return [image_tokens(h, w, IMAGE_MIN_PIXELS, b) for (h, w), b in zip(sizes, budgets)]


def token_report(sample: Sample, settings: EgraSettings, seed: int = 0, draws: int = 8) -> dict:
    """Visual tokens of one document without EGRA, with EGRA at the paper's validation (gold pages sharp,
    ``egra_eval: gold``; the default evaluation is uniform) and in
    training (the mean over ``draws`` seeded draws of S), and the reduction factors."""
    n, gold = len(sample.pages), list(sample.meta.get("evidence_pages", []))
    rng = random.Random(f"{seed}/{sample.id}")
    without = sum(page_tokens(sample, allocate(n, gold, "eval", dataclasses.replace(settings, use=False), rng)))
    val = sum(page_tokens(sample, allocate(n, gold, "eval", settings, rng)))
    train = [sum(page_tokens(sample, allocate(n, gold, TRAIN_SPLIT, settings, rng))) for _ in range(draws)]
    train_mean = sum(train) / len(train)
    return {
        "id": sample.id,
        "pages": n,
        "tokens_without_egra": without,
        "tokens_egra_eval": val,
        "tokens_egra_train": train_mean,
        "reduction_eval": without / val,
        "reduction_train": without / train_mean,
    }
