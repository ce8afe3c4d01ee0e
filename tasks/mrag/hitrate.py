"""Top-k hit rate of the retrievers on hand-written questions: does the item that states the fact come back?

Question file (JSONL), one question a line::

    {"retriever": "Text Retriever" | "Table Retriever" | "Text Image Retriever", "question": str,
     "evidence": str,            # text the right item states (a date, a name, a table row's cells)
     "title": str (optional),    # the right item's title (an article, a table's caption start)
     "item": str (optional)}     # the right item's id, or the start of it ("table:wheat", "image:rocket.jpg")

A question is a hit when one of the top ``k`` hits has the title / id asked for and states the evidence as
whole words (case and runs of spaces aside: "1783" is not found in "17751783"). Evidence is matched against
the item's full text (a hit cut by the token budget still counts: the budget is the caller's choice).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mmreason.tasks.mrag.kb import KB_OF_RETRIEVER, KnowledgeBases


@dataclass(frozen=True)
class Question:
    retriever: str
    question: str
    evidence: str
    title: str | None = None
    item: str | None = None


def read_questions(path: str | Path) -> list[Question]:
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            question = Question(**row)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{path}: line {n} is not a question row ({err})") from None
        if question.retriever not in KB_OF_RETRIEVER or not question.evidence.strip():
            raise ValueError(f"{path}: line {n} needs a known retriever and non-empty evidence")
        out.append(question)
    return out


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def states(text: str, evidence: str) -> bool:
    """``evidence`` appears in ``text`` as whole words (case and runs of spaces aside)."""
    return re.search(rf"(?<!\w){re.escape(_normal(evidence))}(?!\w)", _normal(text)) is not None


def is_hit(question: Question, item_id: str, title: str, text: str) -> bool:
    if question.item and not item_id.startswith(question.item):
        return False
    if (
        question.title
        and _normal(title) != _normal(question.title)
        and not _normal(title).startswith(_normal(question.title))
    ):
        return False
    return states(text, question.evidence)


def hit_rates(kb: KnowledgeBases, questions: list[Question], k: int = 3) -> dict:
    """Per retriever: questions, hits in the top ``k`` and their share; the misses listed."""
    texts = {item.id: item.text for items in kb.by_kb.values() for item in items}
    per: dict[str, dict] = {}
    misses = []
    for q in questions:
        hits = kb.search(q.retriever, q.question, k=k, token_budget=10**6)
        found = any(is_hit(q, h.item_id, h.title, texts.get(h.item_id, h.text)) for h in hits)
        row = per.setdefault(q.retriever, {"questions": 0, "hits": 0})
        row["questions"] += 1
        row["hits"] += int(found)
        if not found:
            misses.append({"question": q.question, "got": [h.item_id for h in hits]})
    for row in per.values():
        row["rate"] = round(row["hits"] / row["questions"], 3)
    return {"k": k, "by_retriever": per, "misses": misses}
