"""Questions with known routes: table + article, caption + article and no-retrieval questions, seeded, disjoint
train / held-out splits, every gold step findable by its retriever; the loader's default data is built from them."""

from __future__ import annotations

import pytest
from mrag_helpers import small_default_index, small_index

from mmreason.tasks.mrag.data import mrag_load
from mmreason.tasks.mrag.kb import load_index
from mmreason.tasks.mrag.synth import article_facts, splits, table_facts


@pytest.fixture
def kb(tmp_path):
    return load_index(small_index(tmp_path))


def test_facts_are_read_from_the_knowledge_bases(kb):
    assert {(f["sub_question"], f["answer"]) for f in article_facts(kb)} == {
        ("What was Aristotle?", "Greek philosopher"),
        ("What is Anarchism?", "political philosophy"),
    }
    assert ("What was the price of wheat in 1605 in Playfair's table?", "33") in {
        (f["sub_question"], f["answer"]) for f in table_facts(kb)
    }


def test_splits_are_seeded_disjoint_and_carry_gold_routes(kb):
    a, b = splits(kb, seed=3, train=10, held_out=6), splits(kb, seed=3, train=10, held_out=6)
    assert a == b  # deterministic from the seed
    assert splits(kb, seed=4, train=10, held_out=6) != a
    train_q, eval_q = {r["question"] for r in a["train"]}, {r["question"] for r in a["eval"]}
    assert not train_q & eval_q and len(eval_q) == 6
    kinds = {r["kind"] for r in a["train"] + a["eval"]}
    assert kinds == {"table+text", "image+text", "none"}
    for row in a["train"] + a["eval"]:
        routes = [s["kb"] for s in row["steps"]]
        assert (
            routes
            == {
                "table+text": ["Table Retriever", "Text Retriever"],
                "image+text": ["Text Image Retriever", "Text Retriever"],
                "none": [],
            }[row["kind"]]
        )
        if row["kind"] == "none":
            x, y = (int(w.rstrip("?")) for w in row["question"].split()[2::2])
            assert row["answer"] == str(x + y)
        for step in row["steps"]:  # each gold fact comes back from its own retriever
            hits = kb.search(step["kb"], step["sub_question"], k=3, token_budget=300)
            assert any(step["answer"].lower() in h.text.lower() for h in hits), step
        assert row["answer"] == "; ".join(s["answer"] for s in row["steps"]) or row["kind"] == "none"


def test_default_data_is_generated_from_the_cached_index(tmp_path, monkeypatch):
    small_default_index(tmp_path / "cache", monkeypatch)
    train = mrag_load(split="train", train_questions=8, eval_questions=4)
    held_out = mrag_load(split="eval", train_questions=8, eval_questions=4)
    assert {s.meta["question"] for s in train}.isdisjoint({s.meta["question"] for s in held_out})
    assert {s.meta["step_type"] for s in train} == {"ret", "ans"}
    assert mrag_load(split="train", train_questions=8, eval_questions=4)[0].id == train[0].id  # cached, same questions


def test_real_knowledge_bases_give_the_default_sizes(tmp_path):
    for package in ("gensim", "skimage", "vega_datasets"):
        pytest.importorskip(package)
    from mmreason.tasks.mrag.kb import build_index

    kb = load_index(build_index(tmp_path / "real", max_articles=20))
    parts = splits(kb, seed=0, train=40, held_out=20)
    assert len(parts["train"]) == 40 and len(parts["eval"]) == 20
    assert len(article_facts(kb)) >= 5 and len(table_facts(kb)) > 300
