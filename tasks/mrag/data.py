"""Data of the mrag pack: user rows (JSONL / parquet through ``datasets``) unrolled into step prompts.

Row shape::

    {"id": str, "question": str, "image": path (optional), "answer": str,
     "steps": [{"sub_question": str, "kb": "Text Retriever" | "Text Image Retriever" | "Table Retriever" | "None",
                "answer": str (optional: the intermediate answer shown in later steps' history)}],
     "thinks": [str] (optional: the think text of each step, the final one last), ...any other column}

``unroll=True`` (offline Step-GRPO, the paper's way, and SFT): each gold step becomes its own sample
``{id}#s{k}`` with ``step_index = k`` and the columns ``route_step`` reads (``step_type``,
``sub_question``, ``knowledge_base``); ``unroll=False`` (online multi-turn rollouts through the environment):
one sample per question, the gold route in ``gold_steps``. Relative image paths resolve against the data
file. Values are kept as written (an answer "007" is not the number 7). A bad row raises ValueError naming the
file, the row and the field; a row of more than ``MAX_STEPS`` steps is refused.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mmreason.rows import check_count, require_text
from mmreason.rows import read_rows as rows_of
from mmreason.rows import where as row_where
from mmreason.tasks.mrag.kb import shared_index, use_search_fn
from mmreason.tasks.mrag.steps import GoldStep, parse_steps, render_step, step_prompt, unroll
from mmreason.tasks.mrag.synth import generated_split
from mmreason.types import Sample

RESERVED = ("id", "question", "image", "answer", "steps", "thinks")
# Gold steps per row: R1-Router's routes take 1-4; each unrolled step prompt repeats the history before it, so a
# row of S steps costs O(S^2) prompt text (a 10,000-step row took 43 s and 7 GB to load). Over it, the row is refused.
MAX_STEPS = 16


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The file's rows, every value as written (``mmreason.rows``: an answer "007" stays "007")."""
    return rows_of(path, "mrag")


def _messages(text: str, has_image: bool) -> list[dict[str, Any]]:
    content = ([{"type": "image"}] if has_image else []) + [{"type": "text", "text": text}]
    return [{"role": "user", "content": content}]


def row_to_samples(row: dict[str, Any], source: str, index: int, unrolled: bool = True) -> list[Sample]:
    where = row_where(source, index, row)
    for key in ("id", "question", "answer"):
        if row.get(key) is None or str(row.get(key)).strip() == "":
            raise ValueError(f"{where} has no {key!r} column")
    require_text(where, row, ("id", "question", "answer", "image"), numbers=("id", "answer"))
    check_count(where, "steps", row.get("steps"), MAX_STEPS, "MAX_STEPS in tasks/mrag/data.py")
    check_count(where, "thinks", row.get("thinks"), MAX_STEPS + 1, "MAX_STEPS + 1 in tasks/mrag/data.py")
    thinks = row.get("thinks")
    if thinks is not None and not (isinstance(thinks, list) and all(isinstance(t, (str, type(None))) for t in thinks)):
        raise ValueError(f"{where}: 'thinks' must be a list of strings (one think text per step)")
    steps = parse_steps(row.get("steps"), where)
    image = row.get("image")
    if isinstance(image, str) and image and not os.path.isabs(image):
        image = str(Path(source).parent / image)
    images = [image] if image else []
    question, answer = str(row["question"]), str(row["answer"])
    extra = {k: v for k, v in row.items() if k not in RESERVED and v is not None}
    gold = [{"sub_question": s.sub_question, "kb": s.kb, "answer": s.answer} for s in steps]
    base = {**extra, "question": question, "gold_steps": gold, "num_steps": len(steps)}
    if not unrolled:
        meta = {**base, "step_index": 0, "step_type": "episode", "target": _full_target(steps, answer)}
        return [
            Sample(
                id=str(row["id"]),
                messages=_messages(step_prompt(question, []), bool(images)),
                answer=answer,
                images=list(images),
                meta=meta,
                task="mrag",
            )
        ]
    out = []
    for step in unroll(question, steps, answer, row.get("thinks")):
        meta = {
            **base,
            "step_index": step.step_index,
            "step_type": step.step_type,
            "sub_question": step.sub_question,
            "knowledge_base": step.knowledge_base,
            "target": step.target,
        }
        out.append(
            Sample(
                id=f"{row['id']}#s{step.step_index}",
                messages=_messages(step.prompt, bool(images)),
                answer=answer,
                images=list(images),
                meta=meta,
                task="mrag",
            )
        )
    return out


def _full_target(steps: list[GoldStep], answer: str) -> str:
    """The whole gold route as one text (online variant's SFT target is per step; this is for the logs)."""
    return "".join(render_step("", s.sub_question, s.kb) for s in steps) + render_step("", answer=answer)


def mrag_load(
    path: str | None = None,
    split: str = "train",
    *,
    unrolled: bool = True,
    n: int | None = None,
    seed: int = 0,
    train_questions: int | None = None,
    eval_questions: int | None = None,
    search_fn: str | None = None,
) -> list[Sample]:
    """The pack's data (``data.task_args`` are these options).

    path: a JSONL/parquet file in the row shape above; None = questions generated from the knowledge bases
        (cached; ``train_questions`` / ``eval_questions``, default 256 / 64, disjoint; ``seed``).
    unrolled: one sample per gold step (offline Step-GRPO, SFT) or one per question (online episodes).
    n: the first n *questions*.
    search_fn: the environment's search function instead of the built-in retrievers (a registered name,
        ``pkg.module:function`` or ``path/file.py:function``; ``plugins.py``).
    """

    use_search_fn(search_fn)
    if path is None:
        path = str(generated_split(split, seed, train_questions, eval_questions))
    if not unrolled:  # episodes query the cached index: a missing or corrupt one is an error now, not mid-run
        shared_index()
    rows = read_rows(path)[:n] if n else read_rows(path)
    return [s for i, row in enumerate(rows) for s in row_to_samples(row, str(path), i, unrolled)]
