"""A search function of the user's in place of the built-in BM25 / dense retrievers: bring your own index.

A search function is named the way rewards are: a registered name (``@SEARCH_FUNCTIONS.register("my_index")``
in a module you import), ``pkg.module:function`` or ``path/to/file.py:function``. It is called as

    fn(query: str, retriever: str, k: int) -> list of hits

where ``retriever`` is "Text Retriever", "Text Image Retriever" or "Table Retriever" and each hit is a ``Hit``
or a dict ``{"id": str, "text": str, "title": str (optional), "score": float (optional), "image": path
(optional)}``, best first. The pack keeps at most ``k`` hits and cuts them to the token budget as it does
its own. A function that raises, or returns something else, is a ``KnowledgeBaseError`` naming the function
(an episode step gets an error observation, not a crash).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmreason.registry import Registry
from mmreason.tasks.mrag.kb import KB_OF_RETRIEVER, Hit, KnowledgeBaseError, check_query, fit
from mmreason.tasks.mrag.sources import Item

SEARCH_FUNCTIONS: Registry[Callable[..., Any]] = Registry("mrag search function")
MAX_HIT_CHARS = 100_000


def resolve_search_fn(ref: str | Callable[..., Any], base_dir: str | Path | None = None) -> Callable[..., Any]:
    """The function ``ref`` names (a callable is returned as it is); an unknown name lists the valid ones."""
    if callable(ref):
        return ref
    if not isinstance(ref, str) or not ref.strip():
        raise KnowledgeBaseError(
            f"a search function is a registered name, 'pkg.module:function' or 'file.py:function', got {ref!r}"
        )
    try:
        return SEARCH_FUNCTIONS.get(ref, None if base_dir is None else str(base_dir))
    except (KeyError, ImportError, FileNotFoundError, TypeError, ValueError, AttributeError) as err:
        raise KnowledgeBaseError(f"search function {ref!r}: {str(err).strip(chr(39))}") from None


def _as_hit(raw: Any, name: str, n: int, retriever: str) -> tuple[Item, float]:
    where = f"search function {name} returned, as hit {n},"
    if isinstance(raw, Hit):
        raw = {"id": raw.item_id, "title": raw.title, "text": raw.text, "score": raw.score, "image": raw.image}
    if not isinstance(raw, dict):
        raise KnowledgeBaseError(f"{where} a {type(raw).__name__}, not a dict with 'id' and 'text'")
    item_id, text = raw.get("id"), raw.get("text")
    if not isinstance(item_id, str) or not item_id or not isinstance(text, str):
        raise KnowledgeBaseError(f"{where} no string 'id' and 'text'")
    score = raw.get("score", 0.0)
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise KnowledgeBaseError(f"{where} a score that is not a finite number: {score!r}"[:300])
    title, image = raw.get("title") or "", raw.get("image")
    if not isinstance(title, str) or not (image is None or isinstance(image, str)):
        raise KnowledgeBaseError(f"{where} a 'title' or 'image' that is not a string")
    return Item(item_id[:200], KB_OF_RETRIEVER[retriever], title[:200], text[:MAX_HIT_CHARS], image), float(score)


class FunctionRetriever:
    """One knowledge base served by a user's search function (the ``Retriever`` interface)."""

    def __init__(self, fn: Callable[..., Any], retriever: str):
        self.fn, self.retriever = fn, retriever
        self.name = getattr(fn, "__qualname__", None) or repr(fn)

    def search(self, query: str, k: int, token_budget: int) -> list[Hit]:
        check_query(query)
        try:
            raw = self.fn(query, self.retriever, k)
        except Exception as err:  # the user's index: any failure is this step's error, not the run's
            raise KnowledgeBaseError(
                f"search function {self.name} failed on the {self.retriever}: {type(err).__name__}: {str(err)[:200]}"
            ) from err
        if not isinstance(raw, (list, tuple)):
            raise KnowledgeBaseError(f"search function {self.name} returned a {type(raw).__name__}, not a list")
        ranked = [_as_hit(h, self.name, n, self.retriever) for n, h in enumerate(raw[:k], start=1)]
        return fit(ranked, k, token_budget)
