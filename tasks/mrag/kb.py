"""The three knowledge bases behind one retriever interface, built once and cached on disk.

``build_index(folder)`` reads the sources (``sources.py``), writes ``items.jsonl`` (one item a line) and
``manifest.json`` (format version, item counts, the items file's sha256, the source files' sha256) last, so a
folder with a manifest is complete. ``load_index`` checks the manifest and the checksum: a missing or corrupt
index is a ``KnowledgeBaseError`` that says how to rebuild it. Retrieval is lexical BM25 (``rank_bm25``) per
knowledge base, a query that names an article's title getting its lead passage first; ``DenseRetriever`` ranks
by a local ``from_pretrained`` encoder (e.g. BGE-M3) instead, and a search function of the user's
(``search_fn``, ``plugins.py``) replaces both with the user's own index.
``search`` returns at most ``k`` hits whose texts fit ``token_budget`` (whitespace tokens; the last hit is cut;
default ``k * TOKENS_PER_HIT``, room for ``k`` whole passages).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from mmreason.paths import cache_dir
from mmreason.tasks.mrag import sources
from mmreason.tasks.mrag.rewards import embed
from mmreason.tasks.mrag.sources import Item

INDEX_VERSION = 2  # 2: templates written out in passages (wikitext.py), month names in table dates
KB_OF_RETRIEVER = {"Text Retriever": "text", "Text Image Retriever": "image", "Table Retriever": "table"}
MAX_QUERY_CHARS = 1_000  # a longer query is an error, not a slow search
MAX_QUERY_TERMS = 64
TOKENS_PER_HIT = 150  # a passage is ~100 words, a table chunk (header and 4 rows) at most ~100 tokens
_WORD = re.compile(r"\d+(?:\.\d+)+|[a-z0-9]+")  # decimals ("7.9") are one term
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")  # "sepalLength" -> "sepal Length"
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # "1,300" -> "1300"
STOPWORDS = frozenset(
    "a an the of in on at to for by with and or is are was were be been what which who whom "
    "whose when where how why does did do this that these those it its as from".split()
)


class KnowledgeBaseError(RuntimeError):
    """A missing, corrupt or stale index, or a query that cannot be run; the message says what to do."""


def default_index_dir() -> Path:
    return cache_dir("mrag", f"index-v{INDEX_VERSION}")


def terms(text: str) -> list[str]:
    """Lower-case search terms: camel case split, thousands separators dropped, decimals kept whole,
    stopwords out. ``terms("sepalLength 7.9, 1,300 mi")`` == ["sepal", "length", "7.9", "1300", "mi"]."""
    text = _THOUSANDS.sub("", _CAMEL.sub(" ", text)).lower()
    return [w for w in _WORD.findall(text) if w not in STOPWORDS]


# ---- build and load ----------------------------------------------------------------------------


def build_index(folder: str | Path | None = None, *, force: bool = False, max_articles: int | None = None) -> Path:
    """Build the knowledge bases into ``folder`` (default: the cache) unless a complete one is there."""

    folder = Path(folder or default_index_dir())
    if (folder / "manifest.json").exists() and not force:
        return folder
    start = time.perf_counter()
    try:
        items = sources.text_items(max_articles) + sources.table_items() + sources.image_items()
    except ImportError as err:
        raise KnowledgeBaseError(
            f"building the mrag knowledge bases needs gensim, scikit-image and vega_datasets "
            f'({err}): pip install "mmreason[mrag]"'
        ) from err
    extra = {"sources": sources.source_files(), "licences": sources.LICENCES}
    return write_index(folder, items, extra, time.perf_counter() - start)


def write_index(folder: str | Path, items: list[Item], extra: dict | None = None, seconds: float = 0.0) -> Path:
    """Write ``items`` as an index: items first, the manifest (with the items' checksum) last."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)
    payload = "".join(json.dumps(asdict(item)) + "\n" for item in items).encode()
    (folder / "items.jsonl").write_bytes(payload)
    counts = {kb: sum(i.kb == kb for i in items) for kb in ("text", "table", "image", "row")}
    manifest = {
        "version": INDEX_VERSION,
        "counts": counts,
        "items_sha256": hashlib.sha256(payload).hexdigest(),
        **(extra or {}),
        "build_seconds": round(seconds, 2),
        "bytes": len(payload),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return folder


def load_index(folder: str | Path | None = None, search_fn: str | Callable[..., Any] | None = None) -> KnowledgeBases:
    folder = Path(folder or default_index_dir())
    rebuild = f"run `mmreason data mrag build --index {folder} --force`"
    manifest_path, items_path = folder / "manifest.json", folder / "items.jsonl"
    if not manifest_path.exists() or not items_path.exists():
        raise KnowledgeBaseError(f"no mrag knowledge-base index in {folder}: {rebuild.replace(' --force', '')}")
    try:
        manifest = json.loads(manifest_path.read_text())
        payload = items_path.read_bytes()
    except (OSError, ValueError) as err:
        raise KnowledgeBaseError(f"mrag index in {folder} is unreadable ({err}); {rebuild}") from None
    if not isinstance(manifest, dict) or manifest.get("version") != INDEX_VERSION:
        raise KnowledgeBaseError(
            f"mrag index in {folder} has format {manifest.get('version') if isinstance(manifest, dict) else '?'}, "
            f"this version reads {INDEX_VERSION}; {rebuild}"
        )
    if hashlib.sha256(payload).hexdigest() != manifest.get("items_sha256"):
        raise KnowledgeBaseError(
            f"mrag index in {folder} is corrupt (items.jsonl does not match its checksum); {rebuild}"
        )
    items = [Item(**json.loads(line)) for line in payload.decode().splitlines()]
    return KnowledgeBases(items, folder, search_fn=search_fn)


# ---- retrieval ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    item_id: str
    title: str
    text: str
    score: float
    image: str | None = None


class Retriever(Protocol):
    def search(self, query: str, k: int, token_budget: int) -> list[Hit]: ...


def check_query(query: str) -> list[str]:
    if len(query) > MAX_QUERY_CHARS:
        raise KnowledgeBaseError(f"query of {len(query)} characters is over the limit of {MAX_QUERY_CHARS}")
    words = terms(query)[:MAX_QUERY_TERMS]
    if not words:
        raise KnowledgeBaseError("empty query: no searchable words")
    return words


def fit(ranked: list[tuple[Item, float]], k: int, token_budget: int) -> list[Hit]:
    """At most ``k`` hits whose whitespace tokens sum to at most ``token_budget`` (the last one cut)."""
    hits, left = [], token_budget
    for item, score in ranked[:k]:
        if left <= 0:
            break
        words = item.text.split()
        text = item.text if len(words) <= left else " ".join(words[:left]) + " ..."
        left -= min(len(words), left)
        hits.append(Hit(item.id, item.title, text, score, item.image))
    return hits


class BM25Retriever:
    """Okapi BM25 over one knowledge base's items (``rank_bm25``, k1 = 1.5, b = 0.75).

    A query that holds all of a title's words ("Who wrote Animal Farm?", "When was Aldous Huxley born?") names
    that article: its lead item (the first with the title, where an encyclopedia article defines its subject and
    gives the dates of a life) comes first, BM25's order after it. Of several titles held, the one with the most
    words wins ("Animal Farm" over "Farm"), then the one whose lead scores higher. Plain BM25 cannot tell the
    lead from the article's other passages, which all carry the title and often repeat the query's words.
    """

    def __init__(self, items: list[Item]):
        from rank_bm25 import BM25Okapi

        self.items = items
        self.bm25 = BM25Okapi([terms(f"{i.title} {i.text}") or ["_"] for i in items])
        self.leads: dict[frozenset[str], int] = {}
        for j, item in enumerate(items):
            title = frozenset(terms(item.title))
            if title:
                self.leads.setdefault(title, j)

    def named_lead(self, words: list[str], scores) -> int | None:
        """The lead item of the longest title all of whose words the query holds, or None."""
        query = set(words)
        named = [(len(title), float(scores[lead]), -lead) for title, lead in self.leads.items() if title <= query]
        return -max(named)[2] if named else None

    def search(self, query: str, k: int, token_budget: int) -> list[Hit]:
        words = check_query(query)
        scores = self.bm25.get_scores(words)  # [items]
        # Items that share a term with the query (Okapi's IDF goes negative for a term in most of a tiny KB).
        matched = [j for j, freqs in enumerate(self.bm25.doc_freqs) if any(w in freqs for w in words)]
        order = sorted(matched, key=lambda j: (-scores[j], j))
        lead = self.named_lead(words, scores)
        if lead is not None:
            order = [lead] + [j for j in order if j != lead]
        return fit([(self.items[j], float(scores[j])) for j in order], k, token_budget)


class DenseRetriever:
    """Cosine of L2-normalised embeddings from a local ``from_pretrained`` encoder (e.g. BGE-M3, CLS pooling)."""

    def __init__(self, items: list[Item], model_path: str, pooling: str = "cls", batch_size: int = 32):
        import torch

        self.items, self.model_path, self.pooling = items, model_path, pooling
        texts = [f"{i.title}: {i.text}" for i in items]
        self.vectors = torch.cat(
            [embed(texts[s : s + batch_size], model_path, pooling) for s in range(0, len(texts), batch_size)]
        )  # [items, D]

    def search(self, query: str, k: int, token_budget: int) -> list[Hit]:
        check_query(query)
        scores = (self.vectors @ embed([query], self.model_path, self.pooling)[0]).tolist()  # [items]
        order = sorted(range(len(self.items)), key=lambda j: (-scores[j], j))
        return fit([(self.items[j], scores[j]) for j in order], k, token_budget)


class KnowledgeBases:
    """The loaded index: items by knowledge base and one retriever per knowledge base (built on first use):
    BM25, or ``DenseRetriever`` with ``dense_model``, or the user's ``search_fn`` (``plugins.py``; then the
    items may be empty: the function brings its own index)."""

    def __init__(
        self,
        items: list[Item],
        folder: Path | None = None,
        dense_model: str | None = None,
        search_fn: str | Callable[..., Any] | None = None,
    ):
        self.folder, self.dense_model = folder, dense_model
        self.search_fn = None
        if search_fn is not None:
            # here, not at the top: plugins.py imports this module (a cycle)
            from mmreason.tasks.mrag.plugins import resolve_search_fn

            self.search_fn = resolve_search_fn(search_fn)
        self.by_kb: dict[str, list[Item]] = {}
        for item in items:
            self.by_kb.setdefault(item.kb, []).append(item)
        self._retrievers: dict[str, Retriever] = {}

    def retriever(self, name: str) -> Retriever:
        """The retriever of ``name`` ("Text Retriever", "Text Image Retriever", "Table Retriever")."""
        if name not in KB_OF_RETRIEVER:
            raise KnowledgeBaseError(f"unknown retriever {name[:80]!r}; known: {', '.join(KB_OF_RETRIEVER)}")
        kb = KB_OF_RETRIEVER[name]
        if kb not in self._retrievers:
            if self.search_fn is not None:
                # here, not at the top: plugins.py imports this module (a cycle)
                from mmreason.tasks.mrag.plugins import FunctionRetriever

                self._retrievers[kb] = FunctionRetriever(self.search_fn, name)
                return self._retrievers[kb]
            items = self.by_kb.get(kb, [])
            if not items:
                raise KnowledgeBaseError(f"the {name} has no items in this index")
            self._retrievers[kb] = DenseRetriever(items, self.dense_model) if self.dense_model else BM25Retriever(items)
        return self._retrievers[kb]

    def search(self, retriever: str, query: str, k: int = 3, token_budget: int | None = None) -> list[Hit]:
        """At most ``k`` hits within ``token_budget`` whitespace tokens (default ``k * TOKENS_PER_HIT``)."""
        if token_budget is None:
            token_budget = k * TOKENS_PER_HIT
        if k < 1 or token_budget < 1 or not math.isfinite(token_budget):
            raise KnowledgeBaseError(f"k={k} and token_budget={token_budget} must be positive")
        return self.retriever(retriever).search(query, k, token_budget)


_LOADED: dict[tuple[str, str], KnowledgeBases] = {}
_DEFAULT_SEARCH_FN: dict[str, str | None] = {"ref": None}


def use_search_fn(ref: str | None) -> None:
    """Make ``ref`` (see ``plugins.py``) the search function of ``shared_index`` in this process (the
    pack's ``data.task_args.search_fn``); None goes back to the built-in retrievers. Resolved now, so a bad
    reference fails at start-up."""
    if ref is not None:
        # here, not at the top: plugins.py imports this module (a cycle)
        from mmreason.tasks.mrag.plugins import resolve_search_fn

        resolve_search_fn(ref)
    _DEFAULT_SEARCH_FN["ref"] = ref


def shared_index(folder: str | Path | None = None, search_fn: str | None = None) -> KnowledgeBases:
    """The index of ``folder`` loaded once per process (environments are created per episode); with a search
    function (``search_fn`` or ``use_search_fn``'s) no built index is needed: the function brings its own."""
    ref = search_fn or _DEFAULT_SEARCH_FN["ref"]
    key = (str(Path(folder or default_index_dir())), ref or "")
    if key not in _LOADED:
        _LOADED[key] = KnowledgeBases([], search_fn=ref) if ref else load_index(key[0])
    return _LOADED[key]
