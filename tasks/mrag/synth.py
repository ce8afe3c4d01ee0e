"""Questions with known routes, built from the knowledge bases (deterministic from a seed).

Three kinds, each with its gold steps (sub-question, knowledge base, intermediate answer) and answer:

- ``table+text``: a fact from a table row (Table Retriever) plus a definitional fact from the first passage of
  a Wikipedia article (Text Retriever); the answer gives both, separated by "; ".
- ``image+text``: a fact from an image's caption (Text Image Retriever) plus an article fact.
- ``none``: arithmetic that needs no retrieval (no steps; the first step answers).

Every fact is read back from an item of the index, so a retriever can find it. Train and held-out splits are
disjoint question sets: the pool is shuffled with the seed and the held-out questions drawn first.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

from mmreason.paths import cache_dir, write_jsonl
from mmreason.tasks.mrag.kb import KnowledgeBases, build_index, load_index, terms
from mmreason.tasks.mrag.sources import TABLES
from mmreason.tasks.mrag.steps import NONE, TABLE, TEXT, TEXT_IMAGE

DATA_VERSION = 2  # 2: built from index format 2 (template facts in passages, month names in table dates)
TRAIN_QUESTIONS, EVAL_QUESTIONS = 256, 64
KIND_SHARE = {"table+text": 0.4, "image+text": 0.3, "none": 0.3}

# (sub-question, answer) per image, each answer stated in the image's caption (sources.IMAGES).
IMAGE_FACTS = {
    "astronaut": ("Which shuttle mission did the astronaut in the photograph first pilot?", "STS-63"),
    "rocket": ("Which rocket carried DSCOVR in the launch photograph?", "Falcon 9"),
    "coins": ("Where do the Greek coins in the photograph come from?", "Pompeii"),
    "coffee": ("At which espresso bar was the coffee cup photographed?", "Pikolo Espresso Bar"),
    "chelsea": ("What is the name of the cat in the photograph?", "Chelsea"),
    "hubble_deep_field": ("Which telescope took the eXtreme Deep Field photograph?", "Hubble"),
    "retina": ("Which eye does the retina photograph show?", "left"),
}
_DEFINITION = re.compile(
    r"\b(is|was) (?:a|an|the) ((?:[A-Za-z-]+ ){1,3}[A-Za-z-]+?)"
    r"(?= (?:in|of|from|who|that|which|and|for|by|on|with)\b|[,.;(])"
)
_WEAK_ENDINGS = ("located", "made", "written", "concerned", "characterized", "trained", "situated")


def article_facts(kb: KnowledgeBases) -> list[dict[str, str]]:
    """(sub-question, answer) from the first passage of each article: "X is a <2-4 words>" -> "What is X?"."""
    seen, facts = set(), []
    for item in kb.by_kb.get("text", []):
        if item.title in seen:
            continue
        seen.add(item.title)
        head = item.text[:400]
        name = re.escape(item.title.split(" (")[0])
        mention = re.search(name, head, re.IGNORECASE)
        m = _DEFINITION.search(head, mention.end()) if mention else None
        if m is None or m.start() - mention.end() > 80 or not terms(item.title):  # the defining clause only
            continue
        answer = m.group(2)
        if answer.split()[-1] in _WEAK_ENDINGS:
            continue
        facts.append({"sub_question": f"What {m.group(1)} {item.title.split(' (')[0]}?", "kb": TEXT, "answer": answer})
    return facts


def _row_fact(table: str, row: dict[str, str]) -> tuple[str, str] | None:
    if table == "cars" and row.get("Horsepower") not in (None, "nan"):
        return f"What is the horsepower of the {row['Name']} in the cars table?", row["Horsepower"]
    if table == "barley":
        return (f"What was the yield of {row['variety']} barley at {row['site']} in {row['year']}?", row["yield"])
    if table == "wheat" and row.get("wheat") not in (None, "nan"):
        return f"What was the price of wheat in {row['year']} in Playfair's table?", row["wheat"]
    if table == "crimea":
        return f"How many British soldiers died of disease in {row['date']} in the Crimean War?", row["disease"]
    if table == "burtin":
        return f"What is the penicillin concentration for {row['Bacteria']} in Burtin's table?", row["Penicillin"]
    return None


def table_facts(kb: KnowledgeBases) -> list[dict[str, str]]:
    """(sub-question, answer) per table row with a unique key (duplicated questions are dropped)."""
    names = {title: name for name, title in TABLES.items()}
    counts: dict[str, int] = {}
    pending = []
    for item in kb.by_kb.get("row", []):
        fact = _row_fact(names.get(item.title, ""), item.fields)
        if fact is not None:
            counts[fact[0]] = counts.get(fact[0], 0) + 1
            pending.append(fact)
    return [{"sub_question": q, "kb": TABLE, "answer": a} for q, a in pending if counts[q] == 1]


def image_facts(kb: KnowledgeBases) -> list[dict[str, str]]:
    present = {item.title for item in kb.by_kb.get("image", [])}
    return [
        {"sub_question": q, "kb": TEXT_IMAGE, "answer": a} for name, (q, a) in IMAGE_FACTS.items() if name in present
    ]


def _join(first: dict[str, str], second: dict[str, str]) -> str:
    a, b = first["sub_question"].rstrip("?"), second["sub_question"].rstrip("?")
    return f"{a}, and {b[0].lower() + b[1:]}? Give both answers separated by a semicolon."


def question_pool(kb: KnowledgeBases, seed: int, size: int) -> list[dict[str, Any]]:
    """``size`` distinct questions in the kinds' shares (fewer if the facts run out), seeded."""
    rng = random.Random(seed)
    tables, articles, images = table_facts(kb), article_facts(kb), image_facts(kb)
    rows: dict[str, dict[str, Any]] = {}
    for n, (kind, share) in enumerate(KIND_SHARE.items()):
        want, tries = round(size * share) if n < len(KIND_SHARE) - 1 else size - len(rows), 0
        made = 0
        while made < want and tries < 50 * want:
            tries += 1
            if kind == "none":
                a, b = rng.randint(2, 99), rng.randint(2, 99)
                row = {"question": f"What is {a} plus {b}?", "steps": [], "answer": str(a + b)}
            else:
                first_pool = tables if kind == "table+text" else images
                if not first_pool or not articles:
                    break
                first, second = rng.choice(first_pool), rng.choice(articles)
                row = {
                    "question": _join(first, second),
                    "steps": [first, second],
                    "answer": f"{first['answer']}; {second['answer']}",
                }
            if row["question"] not in rows:
                rows[row["question"]] = {"kind": kind, **row}
                made += 1
    pool = list(rows.values())
    rng.shuffle(pool)
    return pool


def splits(
    kb: KnowledgeBases, seed: int, train: int | None = None, held_out: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Disjoint train / eval rows (ids ``mrag-{split}-{k}``)."""
    train, held_out = train or TRAIN_QUESTIONS, held_out or EVAL_QUESTIONS
    pool = question_pool(kb, seed, train + held_out)
    parts = {"eval": pool[:held_out], "train": pool[held_out : held_out + train]}
    return {name: [{"id": f"mrag-{name}-{k}", **row} for k, row in enumerate(rows)] for name, rows in parts.items()}


def write_splits(
    out: str | Path,
    seed: int = 0,
    train: int | None = None,
    held_out: int | None = None,
    index: str | Path | None = None,
) -> list[Path]:
    kb = load_index(build_index(index))
    out = Path(out)
    return [write_jsonl(out / f"{name}.jsonl", rows) for name, rows in splits(kb, seed, train, held_out).items()]


def generated_split(
    split: str, seed: int = 0, train: int | None = None, held_out: int | None = None, index: str | Path | None = None
) -> Path:
    """The default data: both splits generated once per (seed, sizes) into the cache; any split but train reads
    the held-out questions."""
    train, held_out = train or TRAIN_QUESTIONS, held_out or EVAL_QUESTIONS
    folder = cache_dir("mrag", f"questions-v{DATA_VERSION}-{seed}-{train}-{held_out}")
    name = "train" if split == "train" else "eval"
    if not (folder / f"{name}.jsonl").exists():
        write_splits(folder, seed, train, held_out, index)
    return folder / f"{name}.jsonl"


__all__ = [
    "NONE",
    "article_facts",
    "generated_split",
    "image_facts",
    "question_pool",
    "splits",
    "table_facts",
    "write_splits",
]
