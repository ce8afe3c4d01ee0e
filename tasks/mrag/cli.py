"""mrag data tools: build the knowledge-base index (cached), generate questions with known routes.

    mmreason data mrag build [--index DIR] [--force]                   # text + table + image KBs, cached
    mmreason data mrag search --retriever "Text Retriever" --query Q [--k 3] [--budget N] [--search-fn F]
    mmreason data mrag generate --out DIR [--train N] [--eval N] [--seed S]
    mmreason data mrag hitrate QUESTIONS.jsonl [--k 3]                 # top-k hit rate on hand-written questions

The per-step majority baseline is ``mmreason eval baseline --task mrag`` (baseline.py); two samples files
compare step by step with ``mmreason eval paired --metric routing_accuracy``.

The tools not loaded with the pack are imported inside ``run``, for ``mmreason data``'s start-up (mmreason/cli.py).
"""

from __future__ import annotations

import argparse
import json

from mmreason.tasks.mrag.kb import KnowledgeBaseError, KnowledgeBases, build_index, load_index
from mmreason.tasks.mrag.synth import write_splits

ACTIONS = ("build", "search", "generate", "hitrate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=ACTIONS, help="build the index, query it, or write questions")
    parser.add_argument("--index", help="index folder (default: the mmreason cache)")
    parser.add_argument("--force", action="store_true", help="build: rebuild even if a complete index exists")
    parser.add_argument("--retriever", default="Text Retriever", help="search: the knowledge base to ask")
    parser.add_argument("--query", default="", help="search: the query")
    parser.add_argument("--k", type=int, default=3, help="search: at most this many items")
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="search: token budget of the returned items (default: room for k whole items)",
    )
    parser.add_argument(
        "--search-fn",
        default=None,
        help="search, hitrate: a search function of your own "
        "(registered name, pkg.module:function or file.py:function) instead of BM25",
    )
    parser.add_argument("--out", help="generate: output folder (train.jsonl, eval.jsonl, images)")
    parser.add_argument("--train", type=int, default=None, help="generate: train questions")
    parser.add_argument("--eval", type=int, default=None, help="generate: held-out questions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("files", nargs="*", help="hitrate: the questions file")


def _kb(args: argparse.Namespace):
    if args.search_fn and not args.index:  # the function brings its own index
        return KnowledgeBases([], search_fn=args.search_fn)
    return load_index(args.index, args.search_fn)


def run(args: argparse.Namespace) -> int:
    try:
        if args.action == "build":
            folder = build_index(args.index, force=args.force)
            manifest = json.loads((folder / "manifest.json").read_text())
            print(
                f"mrag index in {folder}: {manifest['counts']}, {manifest['bytes'] / 1e6:.1f} MB, "
                f"built in {manifest['build_seconds']} s"
            )
            return 0
        if args.action == "hitrate":
            from mmreason.tasks.mrag.hitrate import hit_rates, read_questions

            if len(args.files) != 1:
                raise SystemExit("mmreason data mrag hitrate: give one questions file")
            print(json.dumps(hit_rates(_kb(args), read_questions(args.files[0]), args.k), indent=1))
            return 0
        if args.action == "search":
            for hit in _kb(args).search(args.retriever, args.query, args.k, args.budget):
                print(
                    json.dumps(
                        {
                            "id": hit.item_id,
                            "score": round(hit.score, 3),
                            "text": hit.text,
                            **({"image": hit.image} if hit.image else {}),
                        }
                    )
                )
            return 0
        if not args.out:
            raise SystemExit("mmreason data mrag generate: --out DIR is required")
        for path in write_splits(args.out, args.seed, args.train, args.eval, args.index):
            print(f"wrote {path}")
        return 0
    except KnowledgeBaseError as err:
        raise SystemExit(f"mmreason data mrag {args.action}: {err}") from None
