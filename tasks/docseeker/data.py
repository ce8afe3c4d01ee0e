"""Data of the DocSeeker pack: long-document QA rows (JSONL or parquet, values as written: ``mmreason.rows``).

Row shape (relative paths are relative to the data file):

    {"id": str,
     "document": "doc.pdf" | ["page1.png", "page2.png", ...],   # a PDF or the ordered page images
     "question": str, "answer": str (or a list of acceptable strings),
     "evidence_pages": [int, ...],    # [-1] or [] = no specific evidence page
     "evidence_base": 0 | 1,          # optional; else the loader's ``evidence_base`` (default 1)
     "answer_format": str,            # optional: str | int | float | list | none ...
     "analysis", "localization", "reasoning": str,   # optional ALR annotation (SFT)
     "target": str}                   # optional complete ALR completion (SFT)

DocSeeker's own files load too: ``image`` (page images), ``gt_page`` (0-based evidence pages) and
``conversations`` ([human question, gpt ALR completion]); so do MMLongBench-Doc's published rows
(``samples.json``: ``doc_id``, string ``evidence_pages`` ...; ``mmlongbench.py``), with the PDFs in
``doc_dir`` (default: ``documents/`` beside the data file).

With ``page_retrieval: bm25`` a document of more than ``retrieval_top_k`` pages shows only the pages BM25
ranks highest against the question (``retrieval.py``), in document order, each labelled with its real page
number ("Page 37:"); ``meta["retrieved_pages"]`` lists them and ``meta["page_numbers"]`` labels each
``PageRef``.

Every sample's ``meta["evidence_pages"]`` is 1-based (or ``[-1]``), as the prompt labels the pages
("Page 1:", "Page 2:", ...) and as the ``page_fbeta`` reward reads them (its default ``index_base=1``).
"""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmreason.media import MediaError, pdf_page_count
from mmreason.paths import cache_dir
from mmreason.rewards.mmlongbench import benchmark_format
from mmreason.rows import check_count, require_text
from mmreason.rows import read_rows as rows_of
from mmreason.tasks.docseeker.alr import instruction
from mmreason.tasks.docseeker.egra import EgraSettings, describe_allocation, docseeker_transform
from mmreason.tasks.docseeker.mmlongbench import BadRow, adapt_row, is_published_row
from mmreason.tasks.docseeker.retrieval import METHODS, bm25_pages
from mmreason.tasks.docseeker.synth import MARK_PAGE_SIZE, PAGE_SIZE, generate
from mmreason.types import PageRef, Sample

TASK = "docseeker"
NO_PAGE = [-1]
# Pages of one document a sample keeps (counted from the PDF's header, before any page is rendered): far above
# the documents the paper trains on, far below a 2,000-page file rendered whole. ``task_args.max_pages``
# overrides it (null: no cap).
DEFAULT_MAX_PAGES = 128
BAD_ROWS = ("skip", "error")
PARTIAL = "evidence pages out of range: scored on the answer, left out of the evidence-page metrics"
SKIPS_NAMED = 20  # skipped rows named one by one in the log
# Hard caps on a row's lists, refused (not cut) above: page images listed, evidence pages, conversation turns.
MAX_PAGE_ENTRIES = 10_000
MAX_TURNS = 16
log = logging.getLogger(__name__)


class LoadedSamples(list):
    """The loader's samples, with the rows it skipped: ``skipped`` (reason -> count) and ``errors`` (messages);
    ``partial`` (reason -> count): rows kept but left out of some metrics."""

    def __init__(self, samples=(), skipped: dict[str, int] | None = None, errors: list[str] | None = None):
        super().__init__(samples)
        self.skipped = dict(skipped or {})
        self.errors = list(errors or [])
        self.partial: dict[str, int] = {}


@dataclass(frozen=True)
class Retrieval:
    """Page retrieval of one load (task_args ``page_retrieval``, ``retrieval_top_k``)."""

    method: str = "none"
    top_k: int = 8

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"page_retrieval must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.top_k < 1:
            raise ValueError(f"retrieval_top_k must be >= 1, got {self.top_k}")


def default_cache() -> Path:
    return cache_dir("docseeker")


def _resolve(path: str, base: Path) -> str:
    return path if os.path.isabs(path) else str(base / path)


def evidence_one_based(pages: Any, base: int, where: str) -> list[int]:
    """The evidence pages as sorted 1-based ints; [-1] for "no specific evidence page" (also for [])."""
    if base not in (0, 1):
        raise ValueError(f"{where}: evidence_base must be 0 or 1, got {base!r}")
    values = [] if pages is None else (list(pages) if isinstance(pages, (list, tuple)) else [pages])
    check_count(where, "evidence_pages", values, MAX_PAGE_ENTRIES, "MAX_PAGE_ENTRIES in tasks/docseeker/data.py")
    flat = [v for item in values for v in (item if isinstance(item, (list, tuple)) else [item])]
    numbers = []
    for v in flat:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)) or not str(v).strip().lstrip("-").isdigit():
            raise ValueError(f"{where}: evidence page {v!r} is not a page number")
        numbers.append(int(v))
    if not numbers or numbers == [-1]:
        return list(NO_PAGE)
    out = sorted({v + (1 - base) for v in numbers})
    if out[0] < 1:
        raise ValueError(f"{where}: evidence page {out[0] - (1 - base)} is invalid for evidence_base={base}")
    return out


def _document(row: dict, where: str) -> Any:
    for key in ("document", "pdf", "images", "image"):
        value = row.get(key)
        if not value:
            continue
        if isinstance(value, list):
            check_count(where, key, value, MAX_PAGE_ENTRIES, "MAX_PAGE_ENTRIES in tasks/docseeker/data.py")
            if all(isinstance(v, str) and v for v in value):
                return value
        elif isinstance(value, str):
            return value
        raise ValueError(
            f"{where}: {key!r} must be a PDF path or a list of page image paths, got a JSON {type(value).__name__}"
        )
    raise ValueError(f"{where}: no 'document' column (a PDF path or a list of page image paths)")


def _question_and_target(row: dict, where: str) -> tuple[str, str | None]:
    if row.get("question"):
        return str(row["question"]), row.get("target")
    turns = row.get("conversations") or []
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise ValueError(f"{where}: 'conversations' must be a list of {{from, value}} turns")
    check_count(where, "conversations", turns, MAX_TURNS, "MAX_TURNS in tasks/docseeker/data.py")
    if turns and turns[0].get("value"):
        question = str(turns[0]["value"]).replace("<image>", "").strip()
        target = turns[1].get("value") if len(turns) > 1 else None
        return question, row.get("target") or target
    raise ValueError(f"{where}: no 'question' column")


def row_to_sample(
    row: dict,
    source: str,
    *,
    index: int = 0,
    evidence_base: int,
    egra: EgraSettings,
    max_pages: int | None = DEFAULT_MAX_PAGES,
    tokenizer: Any = None,
    retrieval: Retrieval = Retrieval(),
) -> Sample:
    """One sample: pages as PageRefs (PDF pages, or one page image each), the prompt
    with "Page k:" before each page, and the evidence pages in ``meta`` (1-based). A document of more than
    ``max_pages`` pages keeps its first ``max_pages`` (logged; ``meta["document_pages"]`` then has the full count)."""
    rid = row.get("id")
    where = f"{source}: row {index} (id {rid!r})"
    if rid is None:
        raise ValueError(f"{where} has no 'id' column")
    require_text(where, row, ("id", "question", "target", "answer_format"), numbers=("id",))
    if row.get("answer_format") is not None:
        try:
            benchmark_format(row["answer_format"])
        except ValueError as err:  # "Integer" would load, then fail every MMLongBench-Doc metric
            raise ValueError(f"{where}: {err}") from None
    base_dir = Path(source).parent
    document = _document(row, where)
    if isinstance(document, str):
        pdf = _resolve(document, base_dir)
        count = pdf_page_count(pdf)
        pages = [PageRef(pdf, i) for i in range(count)]
    else:
        pdf = [_resolve(str(p), base_dir) for p in document]
        count = len(pdf)
        pages = [PageRef(image, 0) for image in pdf]
    document_pages = count
    if max_pages and count > max_pages and retrieval.method == "none":
        count = max_pages
        log.warning(
            "%s: the document has %d pages; only the first %d are used (max_pages=%d, task_args.max_pages)",
            where,
            document_pages,
            max_pages,
            max_pages,
        )
    question, target = _question_and_target(row, where)
    if row.get("answer") is None and row.get("final_answer") is None:
        raise ValueError(f"{where}: no 'answer' column")
    answer = row["answer"] if row.get("answer") is not None else row["final_answer"]
    if "evidence_pages" in row:
        base = row["evidence_base"] if row.get("evidence_base") is not None else evidence_base
        evidence = evidence_one_based(row["evidence_pages"], base, where)
    else:
        evidence = evidence_one_based(row.get("gt_page"), 0, where)  # DocSeeker's raw files are 0-based
    if row.get("published_evidence_pages") is not None and evidence[-1] > document_pages:
        # MMLongBench-Doc publishes a few such rows: scored on the answer, left out of the evidence metrics
        row = {
            **row,
            "evidence_left_out": f"evidence page {evidence[-1]} is past the document's {document_pages} pages",
        }
        evidence = list(NO_PAGE)
    if evidence[-1] > count:
        raise ValueError(
            f"{where}: evidence page {evidence[-1]} (1-based) is beyond the document's {count} pages"
            + (f" (max_pages={max_pages})" if max_pages and count < document_pages else "")
        )
    numbers = list(range(1, count + 1))
    if retrieval.method == "bm25" and isinstance(pdf, str):
        numbers = [i + 1 for i in bm25_pages(pdf, question, retrieval.top_k)]
    content: list[dict[str, Any]] = []
    for k in numbers:
        content += [{"type": "text", "text": f"Page {k}:"}, {"type": "image"}]
    text = instruction(count) if len(numbers) == count else retrieved_instruction(len(numbers), count)
    content.append({"type": "text", "text": f"Question: {question}\n\n" + text})
    skip = {
        "id",
        "document",
        "pdf",
        "images",
        "image",
        "question",
        "answer",
        "evidence_pages",
        "evidence_base",
        "gt_page",
        "conversations",
        "target",
        "final_answer",
    }
    meta = {k: v for k, v in row.items() if k not in skip}
    meta.update(
        question=question,
        evidence_pages=evidence,
        num_pages=len(numbers),
        document=pdf,
        answer_format=row.get("answer_format") or "str",
        egra=egra.__dict__.copy(),
        page_allocation=describe_allocation(egra),
    )
    if target:
        meta["target"] = target
    if count < document_pages or len(numbers) < count:
        meta["document_pages"] = document_pages
    if retrieval.method != "none":
        meta.update(retrieved_pages=numbers, page_numbers=numbers, retrieval=retrieval.__dict__.copy())
    if tokenizer is not None:  # the text's exact size, for fitting the page budgets to max_prompt_length
        meta["text_tokens"] = sum(
            len(tokenizer(i["text"], add_special_tokens=False)["input_ids"]) for i in content if i["type"] == "text"
        )
    return Sample(
        id=str(rid),
        messages=[{"role": "user", "content": content}],
        answer=answer,
        pages=[pages[k - 1] for k in numbers],
        meta=meta,
        task=TASK,
    )


def retrieved_instruction(shown: int, total: int) -> str:
    """The instruction when page retrieval shows ``shown`` of the document's ``total`` pages."""
    return instruction(total).replace(
        "its pages are labelled Page 1 to Page {n}".replace("{n}", str(total)),
        f"it has {total} pages, of which the {shown} most relevant are shown, each labelled with its page number",
    )


def _pages_range(pages: Any) -> tuple[int, int]:
    if isinstance(pages, str):
        lo, _, hi = pages.partition("..")
        return int(lo), int(hi or lo)
    if isinstance(pages, (list, tuple)):
        return int(pages[0]), int(pages[-1])
    return int(pages), int(pages)


def docseeker_load(
    path: str | None = None,
    split: str = "train",
    *,
    n: int | None = None,
    seed: int = 0,
    pages: Any = "3..8",
    evidence_base: int = 1,
    use_egra: bool = True,
    egra_k: int = 5,
    egra_high_tokens: int = 1024,
    egra_low_tokens: int = 256,
    egra_eval: str = "uniform",
    max_prompt_length: int | None = None,
    max_pages: int | None = DEFAULT_MAX_PAGES,
    page_width: int | None = None,
    style: str = "report",
    trace: str = "list",
    tokenizer: Any = None,
    doc_dir: str | None = None,
    page_retrieval: str = "none",
    retrieval_top_k: int = 8,
    bad_rows: str = "skip",
    max_bad_fraction: float = 0.5,
) -> list[Sample]:
    """The pack's data: ``path`` (JSONL / parquet in the row shape above) or generated documents.

    Without ``path``, ``n`` documents (default 64 train / 16 otherwise) of ``pages`` ("MIN..MAX") pages
    are generated into ``$MMREASON_CACHE/docseeker`` in ``style`` ``report`` (pages ``page_width`` wide,
    default 850) or ``marks`` (coloured banners, default 112 px wide; synth.py; ``trace``: its ALR trace, ``list`` or ``local``). ``evidence_base`` declares the base of the rows'
    ``evidence_pages`` when a row does not. A document keeps at most ``max_pages`` pages (default
    ``DEFAULT_MAX_PAGES``, read from the PDF header before any page is rendered; None lifts the cap); an
    evidence page beyond the cap is an error naming it. EGRA options are stored on each sample for the ``transform``.
    Eval samples get their (deterministic) allocation now, so consumers that do not call the pack's
    ``transform`` see it too: by default (``egra_eval: uniform``) one budget for every page, fitted to
    ``max_prompt_length`` (the harness passes its own, and the model's ``tokenizer`` to count the text
    with) and never above ``egra_high_tokens``, so the
    prompt does not depend on which pages are gold; ``egra_eval: gold`` is the paper's validation (gold
    pages at the high budget). ``meta["page_allocation"]`` describes the choice for results.json.
    """

    egra = EgraSettings(use_egra, egra_high_tokens, egra_low_tokens, egra_k, egra_eval, max_prompt_length)
    if path is None:
        count = n or (64 if split == "train" else 16)
        split_seed = seed if split == "train" else seed + 10_000
        lo, hi = _pages_range(pages)
        shape = MARK_PAGE_SIZE if style == "marks" else PAGE_SIZE
        width = page_width or shape[0]
        size = (width, round(width * shape[1] / shape[0]))
        kind = ("" if style == "report" else f"{style}-") + ("" if trace == "list" else f"{trace}-")
        folder = default_cache() / f"{kind}{split}-{count}-{lo}-{hi}-{split_seed}-{width}"
        path = str(generate(folder, count, lo, hi, split_seed, size, style, trace))
    if not Path(path).exists():
        raise FileNotFoundError(f"docseeker data file {path!r} does not exist")
    if bad_rows not in BAD_ROWS:
        raise ValueError(f"bad_rows must be one of {', '.join(BAD_ROWS)}, got {bad_rows!r}")
    retrieval = Retrieval(page_retrieval or "none", retrieval_top_k)
    rows = rows_of(path, TASK)  # JSONL, a JSON array or parquet, values as written; one-line errors naming the line
    counter = tokenizer if split != "train" and egra.max_prompt_length else None
    samples = LoadedSamples()
    for index, row in enumerate(rows):
        if n and len(samples) >= n:
            break
        try:
            if is_published_row(row):
                row = adapt_row(row, index, str(path), doc_dir)
            sample = row_to_sample(
                row,
                str(path),
                index=index,
                evidence_base=evidence_base,
                egra=egra,
                max_pages=max_pages,
                tokenizer=counter,
                retrieval=retrieval,
            )
            if split != "train":  # eval allocations are deterministic: fixed now, while the PDF is open
                sample = docseeker_transform(sample, split=split, rng=random.Random(0))
            samples.append(sample)
            if sample.meta.get("evidence_left_out"):
                samples.partial[PARTIAL] = samples.partial.get(PARTIAL, 0) + 1
                log.warning(
                    "%s: row %d: %s: scored on its answer, left out of the evidence-page metrics",
                    path,
                    index,
                    sample.meta["evidence_left_out"],
                )
        except (BadRow, MediaError, ValueError) as err:
            message = str(err) if str(path) in str(err) else f"{path}: row {index}: {err}"
            if bad_rows == "error":
                if str(path) in str(err):
                    raise
                raise ValueError(message) from err
            reason = skip_reason(err)
            samples.skipped[reason] = samples.skipped.get(reason, 0) + 1
            samples.errors.append(message)
    _report_skips(samples, len(rows), str(path), max_bad_fraction)
    return samples


def skip_reason(err: Exception) -> str:
    """A short category of why a row was skipped (the key of ``LoadedSamples.skipped``)."""
    if isinstance(err, BadRow):
        return err.reason
    if isinstance(err, MediaError):
        return "missing PDF" if "does not exist" in err.reason else "unreadable PDF"
    return "evidence page out of range" if "evidence page" in str(err) else "bad row"


def _report_skips(samples: LoadedSamples, total: int, path: str, max_bad_fraction: float) -> None:
    if not samples.errors:
        return
    bad = len(samples.errors)
    counts = ", ".join(f"{reason}: {k}" for reason, k in samples.skipped.items())
    log.warning("%s: skipped %d of %d rows (%s)", path, bad, total, counts)
    for message in samples.errors[:SKIPS_NAMED]:
        log.warning("skipped: %s", message)
    if bad > SKIPS_NAMED:
        log.warning(
            "skipped: ... and %d more (`mmreason data docseeker check --data %s` lists them all)",
            bad - SKIPS_NAMED,
            path,
        )
    if bad > max_bad_fraction * total:
        raise ValueError(
            f"{path}: {bad} of {total} rows cannot be used ({counts}), more than max_bad_fraction="
            f"{max_bad_fraction}; first: {samples.errors[0]}"
        )
