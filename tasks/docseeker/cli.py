"""DocSeeker data tools: synthetic documents, the EGRA visual-token report, questions on real PDFs.

    mmreason data docseeker --out DIR --docs N --pages MIN..MAX [--seed S]        # generate (default)
    mmreason data docseeker egra-report [--data FILE.jsonl | --docs N --pages 40..40] [--k 5 ...]
    mmreason data docseeker outline --pdf FILE.pdf [--pdf ...] --out DIR [--questions 4]
    mmreason data docseeker check --data samples.json [--doc-dir DIR]     # every unusable row, named; exit 1 if any

The position baseline is ``mmreason eval baseline --task docseeker`` (baseline.py); two samples files compare
with ``mmreason eval paired``.

The tools not loaded with the pack are imported inside ``run``, for ``mmreason data``'s start-up (mmreason/cli.py).
"""

from __future__ import annotations

import argparse
import json
import tempfile

from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.docseeker.egra import EgraSettings, token_report
from mmreason.tasks.docseeker.synth import MARK_PAGE_SIZE, PAGE_SIZE, generate

ACTIONS = ("generate", "egra-report", "outline", "check")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        default="generate",
        choices=ACTIONS,
        help="generate synthetic documents (default), report EGRA visual tokens, write "
        "questions from a real PDF's outline, or name the rows a run would skip (check)",
    )
    parser.add_argument("--out", help="output folder (generate, outline)")
    parser.add_argument("--docs", type=int, default=16, help="documents to generate")
    parser.add_argument("--pages", default="3..8", help="pages per document, MIN..MAX")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--page-width",
        type=int,
        default=None,
        help="page width in pixels at 100 dpi (default 850; 112 for --style marks)",
    )
    parser.add_argument(
        "--style",
        default="report",
        choices=("report", "marks"),
        help="report: multi-section reports; marks: small pages with coloured banners, the "
        "question names the evidence page's banner colour (learning checks on small models)",
    )
    parser.add_argument(
        "--trace",
        default="list",
        choices=("list", "local"),
        help="--style marks: the ALR trace; list: every banner, then the page found; local: one "
        "line per page with its banner, box and whether the banner is the asked colour",
    )
    parser.add_argument("--data", help="egra-report, check: a JSONL/parquet file in the loader's shape")
    parser.add_argument("--high", type=int, default=1024, help="EGRA high budget, merged tokens per page")
    parser.add_argument("--low", type=int, default=256, help="EGRA low budget, merged tokens per page")
    parser.add_argument("--k", type=int, default=5, help="EGRA: random extra high-budget pages in training")
    parser.add_argument("--json", action="store_true", help="egra-report: one JSON object per document")
    parser.add_argument("--pdf", action="append", default=[], help="outline: a real PDF (repeatable)")
    parser.add_argument("--questions", type=int, default=4, help="outline: questions per PDF")
    parser.add_argument("--doc-dir", help="check: the PDFs of MMLongBench-Doc rows (default: documents/ beside --data)")


def _pages(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("..")
    return int(lo), int(hi or lo)


def run(args: argparse.Namespace) -> int:
    if args.action == "generate":
        if not args.out:
            raise SystemExit("mmreason data docseeker: --out DIR is required")
        lo, hi = _pages(args.pages)
        shape = MARK_PAGE_SIZE if args.style == "marks" else PAGE_SIZE
        width = args.page_width or shape[0]
        size = (width, round(width * shape[1] / shape[0]))
        path = generate(args.out, args.docs, lo, hi, args.seed, size, args.style, args.trace)
        print(f"wrote {args.docs} documents and {path}")
        return 0
    if args.action == "outline":
        from mmreason.tasks.docseeker.realdocs import write_outline_jsonl

        if not args.out or not args.pdf:
            raise SystemExit("mmreason data docseeker outline: --pdf FILE and --out DIR are required")
        path = write_outline_jsonl(args.pdf, args.out, args.questions, args.seed)
        print(f"wrote {sum(1 for _ in open(path))} questions to {path}")
        return 0
    if args.action == "check":
        return check(args)
    return egra_report(args)


def check(args: argparse.Namespace) -> int:
    """Print one line per row of --data that a run would skip (file, row, reason) and a summary; 1 if any."""

    if not args.data:
        raise SystemExit("mmreason data docseeker check: --data FILE is required")
    samples = docseeker_load(args.data, "train", doc_dir=args.doc_dir, max_bad_fraction=1.0)
    for message in samples.errors:
        print(message)
    counts = ", ".join(f"{reason}: {n}" for reason, n in samples.skipped.items())
    print(f"{args.data}: {len(samples)} rows usable, {len(samples.errors)} not" + (f" ({counts})" if counts else ""))
    return 1 if samples.errors else 0


def egra_report(args: argparse.Namespace) -> int:
    """Print visual tokens per document with and without EGRA, and the mean reduction factors."""

    settings = EgraSettings(True, args.high, args.low, args.k)
    with tempfile.TemporaryDirectory() as tmp:
        if args.data:
            samples = docseeker_load(args.data, "train")
        else:
            lo, hi = _pages(args.pages)
            width = args.page_width or PAGE_SIZE[0]
            size = (width, round(width * PAGE_SIZE[1] / PAGE_SIZE[0]))
            samples = docseeker_load(str(generate(tmp, args.docs, lo, hi, args.seed, size)), "train")
        rows = [token_report(s, settings, args.seed) for s in samples]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    print(f"EGRA: high {args.high} / low {args.low} tokens per page, k = {args.k}")
    print(f"{'document':<28}{'pages':>6}{'without':>10}{'gold val':>10}{'train':>10}{'x val':>8}{'x train':>8}")
    for r in rows:
        print(
            f"{r['id']:<28}{r['pages']:>6}{r['tokens_without_egra']:>10}{r['tokens_egra_eval']:>10}"
            f"{r['tokens_egra_train']:>10.0f}{r['reduction_eval']:>8.2f}{r['reduction_train']:>8.2f}"
        )
    total = {k: sum(r[k] for r in rows) for k in ("tokens_without_egra", "tokens_egra_eval", "tokens_egra_train")}
    print(
        f"{'all':<28}{sum(r['pages'] for r in rows):>6}{total['tokens_without_egra']:>10}"
        f"{total['tokens_egra_eval']:>10}{total['tokens_egra_train']:>10.0f}"
        f"{total['tokens_without_egra'] / total['tokens_egra_eval']:>8.2f}"
        f"{total['tokens_without_egra'] / total['tokens_egra_train']:>8.2f}"
    )
    return 0
