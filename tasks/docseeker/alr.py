r"""The Analysis -> Localization -> Reasoning (ALR) output format of DocSeeker, and SFT targets in it.

    <think>
    \boxed{Question Analysis}
    ...
    \boxed{Evidence Localization}
    ...
    \boxed{Reasoning Process}
    ...
    </think>
    <answer>
    {"evidence_pages": [6], "answer": "Page 6"}
    </answer>

Page numbers are 1-based, as the prompt labels the pages ("Page 1:", "Page 2:", ...). The reward side of
the format is the registered ``docseeker_format`` reward (``rewards.py``); this module writes it.
Source: DocSeeker ``ALR_data_generate/data/output_data/example/ALR_data.json``; docs/methods/packs.md#docseeker.
"""

from __future__ import annotations

import json

from mmreason.types import Sample

HEADERS = (r"\boxed{Question Analysis}", r"\boxed{Evidence Localization}", r"\boxed{Reasoning Process}")

INSTRUCTION = (
    "Answer the question about the document above; its pages are labelled Page 1 to Page {num_pages}.\n"
    "First analyse the question, then locate the evidence pages, then reason step by step. Reply in "
    "exactly this format:\n"
    "<think>\n" + HEADERS[0] + "\n...\n" + HEADERS[1] + "\n...\n" + HEADERS[2] + "\n...\n</think>\n"
    '<answer>\n{"evidence_pages": [page numbers], "answer": "..."}\n</answer>'
)


def instruction(num_pages: int) -> str:
    """The instruction after the question, for a document of ``num_pages`` pages."""
    return INSTRUCTION.replace("{num_pages}", str(num_pages))


def answer_block(evidence_pages: list[int], answer: str) -> str:
    """The ``<answer>`` JSON dict; ``[-1]`` (no specific page) is written as an empty page list."""
    pages = [p for p in evidence_pages if p > 0]
    return "<answer>\n" + json.dumps({"evidence_pages": pages, "answer": answer}, ensure_ascii=False) + "\n</answer>"


def alr_text(analysis: str, localization: str, reasoning: str, evidence_pages: list[int], answer: str) -> str:
    """An ALR completion from its three parts, the 1-based evidence pages and the answer."""
    think = "\n\n".join(f"{h}\n{body.strip()}" for h, body in zip(HEADERS, (analysis, localization, reasoning)))
    return f"<think>\n{think}\n</think>\n{answer_block(evidence_pages, answer)}"


def fallback_parts(sample: Sample) -> tuple[str, str, str]:
    """A plain ALR trace for a sample without an annotation (only question, pages and answer known)."""
    pages = [p for p in sample.meta.get("evidence_pages", []) if p > 0]
    where = (
        f"The evidence is on page {', '.join(map(str, pages))}."
        if pages
        else "No single page holds the evidence; the whole document is needed."
    )
    question = sample.meta.get("question", "")
    return (f"The question asks: {question}", where, f"Reading the evidence gives the answer: {sample.answer}.")


def docseeker_sft_target(sample: Sample) -> str:
    """The assistant text SFT imitates: the sample's ALR annotation rendered in the ALR format.

    Uses, in order: a complete ``target`` column (already an ALR completion, e.g. DocSeeker's
    ``conversations[1]``); the ``analysis`` / ``localization`` / ``reasoning`` columns; a plain trace
    built from the question, the evidence pages and the answer.
    """
    meta = sample.meta
    if meta.get("target"):
        return str(meta["target"])
    parts = (meta.get("analysis"), meta.get("localization"), meta.get("reasoning"))
    if not all(parts):
        parts = fallback_parts(sample)
    answer = sample.answer[0] if isinstance(sample.answer, list) else sample.answer
    return alr_text(*parts, list(meta.get("evidence_pages", [])), str(answer))
