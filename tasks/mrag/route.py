"""One R1-Router step, parsed with the shared bounded parser (tags only, nothing evaluated): an intermediate
``<think/><sub-question>q</sub-question><ret>KB</ret>`` naming exactly one known knowledge base, or the final
``<think/><answer/>``. Source: R1-Router ``src/prompt.py``; docs/methods/packs.md#r1-router."""

from __future__ import annotations

from dataclasses import dataclass

from mmreason.parsing import parse_schema

KNOWLEDGE_BASES = ("Text Retriever", "Text Image Retriever", "Table Retriever", "None")


@dataclass(frozen=True)
class RouteStep:
    """One parsed R1-Router step: an intermediate retrieval step or the final answer."""

    think: str
    sub_question: str | None = None  # None on the final step
    knowledge_base: str | None = None
    answer: str | None = None


ROUTE_TAGS = ("think", "sub-question", "ret", "answer")


def parse_route_step(text: str, knowledge_bases: tuple[str, ...] = KNOWLEDGE_BASES) -> RouteStep | None:
    """``<think/><sub-question/><ret>KB</ret>`` with exactly one known KB, or ``<think/><answer/>``."""
    bodies = parse_schema(text, ("think", "sub-question", "ret"), known=ROUTE_TAGS)
    if bodies is not None:
        kb = bodies[2].strip()
        if kb not in knowledge_bases:  # unknown name, or several ("Text Retriever, Table Retriever")
            return None
        return RouteStep(bodies[0], bodies[1].strip(), kb)
    bodies = parse_schema(text, ("think", "answer"), known=ROUTE_TAGS)
    return RouteStep(bodies[0], answer=bodies[1].strip()) if bodies is not None else None
