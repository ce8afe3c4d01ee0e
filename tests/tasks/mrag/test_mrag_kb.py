"""Knowledge bases: one retriever interface, at most k hits within a token budget, a cached index whose
absence or corruption is a clear error; the real sources (gensim / vega_datasets / scikit-image) when installed."""

from __future__ import annotations

import json

import pytest
from mrag_helpers import small_index

from mmreason.cli import main
from mmreason.tasks.mrag.kb import MAX_QUERY_CHARS, KnowledgeBaseError, build_index, load_index, write_index


@pytest.fixture
def kb(tmp_path):
    return load_index(small_index(tmp_path))


def test_each_retriever_searches_its_own_knowledge_base(kb):
    (top, *_) = kb.search("Text Retriever", "Who discovered argon?", k=3, token_budget=200)
    assert top.item_id == "text:Argon:0"
    assert [h.item_id for h in kb.search("Table Retriever", "wheat price in 1600")] == ["table:wheat:0"]
    (image,) = kb.search("Text Image Retriever", "a tabby cat")
    assert image.image is not None and image.image.endswith("cat.png")


def test_at_most_k_hits_within_the_token_budget(kb):
    assert len(kb.search("Text Retriever", "argon Alaska", k=1, token_budget=500)) == 1
    hits = kb.search("Text Retriever", "argon long passage", k=3, token_budget=40)
    assert sum(len(h.text.replace(" ...", "").split()) for h in hits) <= 40
    assert hits[0].item_id == "text:Long:0" and hits[0].text.endswith("...")  # the long passage, cut


def test_a_query_that_names_an_article_gets_its_lead_passage_first(tmp_path):
    from mmreason.tasks.mrag.sources import Item

    filler, words = "Animal Farm is discussed again here. " * 3, " ".join(f"word{k}" for k in range(60))
    items = [
        Item("text:Animal Farm:0", "text", "Animal Farm", f"Animal Farm is an allegorical novella. {words}"),
        *(Item(f"text:Animal Farm:{k}", "text", "Animal Farm", f"{filler} Part {k}.") for k in (1, 2, 3)),
        Item("text:Farm:0", "text", "Farm", "A farm is an area of land devoted to agriculture."),
    ]
    kb = load_index(write_index(tmp_path / "index", items))
    # A query that holds a title's words, not only one that is the title, names the article.
    for query in ("What is Animal Farm?", "animal farm", "Who wrote Animal Farm?", "Animal Farm discussed"):
        hits = kb.search("Text Retriever", query, k=3)
        assert hits[0].item_id == "text:Animal Farm:0"
        assert [h.item_id for h in hits[1:]] == ["text:Animal Farm:1", "text:Animal Farm:2"]  # BM25's order after
    # "Animal Farm" (two words) wins over "Farm" when both are held; "farm" alone names Farm.
    assert kb.search("Text Retriever", "What is a farm?", k=1)[0].item_id == "text:Farm:0"
    # Without a title in the query the ranking is BM25's: the later, shorter passages repeat the words and
    # outrank the lead (as they do for the title query itself when the rule is off).
    assert kb.search("Text Retriever", "discussed again", k=1)[0].item_id != "text:Animal Farm:0"
    kb.retriever("Text Retriever").leads.clear()
    assert kb.search("Text Retriever", "Who wrote Animal Farm?", k=1)[0].item_id != "text:Animal Farm:0"


@pytest.mark.parametrize(
    "retriever, query, message",
    [
        ("Web Search", "argon", "unknown retriever 'Web Search'"),
        ("Text Retriever", "x" * (100 * 1024), f"over the limit of {MAX_QUERY_CHARS}"),
        ("Text Retriever", "  ?? the of ", "empty query"),
    ],
)
def test_bad_queries_are_knowledge_base_errors(kb, retriever, query, message):
    with pytest.raises(KnowledgeBaseError, match=message):
        kb.search(retriever, query)


def test_missing_and_corrupt_index_say_how_to_rebuild(tmp_path):
    with pytest.raises(KnowledgeBaseError, match="no mrag knowledge-base index.*mmreason data mrag build"):
        load_index(tmp_path / "nothing")
    folder = small_index(tmp_path)
    items = folder / "items.jsonl"
    items.write_bytes(items.read_bytes()[:-30])  # a truncated write
    with pytest.raises(KnowledgeBaseError, match="corrupt.*--force"):
        load_index(folder)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(KnowledgeBaseError, match="unreadable"):
        load_index(folder)


def test_cli_reports_a_missing_index_without_a_traceback(tmp_path, capsys):
    with pytest.raises(SystemExit, match="no mrag knowledge-base index"):
        main(["data", "mrag", "search", "--index", str(tmp_path / "none"), "--query", "argon"])


def test_real_sources_build_once_and_are_cached(tmp_path):
    pytest.importorskip("gensim")
    pytest.importorskip("skimage")
    pytest.importorskip("vega_datasets")
    folder = build_index(tmp_path / "real", max_articles=2)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["counts"]["text"] > 20 and manifest["counts"]["table"] > 100 and manifest["counts"]["image"] >= 10
    assert "wiki" in manifest["sources"] and manifest["licences"]["text"].startswith("CC BY-SA")
    stamp = (folder / "items.jsonl").stat().st_mtime_ns
    assert build_index(folder) == folder and (folder / "items.jsonl").stat().st_mtime_ns == stamp  # cached
    kb = load_index(folder)
    assert kb.search("Table Retriever", "Playfair wheat price 1600")[0].item_id.startswith("table:wheat")
    (hit, *_) = kb.search("Text Image Retriever", "launch of a Falcon 9 rocket")
    assert hit.image.endswith("rocket.jpg")


def test_a_dense_retriever_plugs_in_from_a_local_encoder(tmp_path):
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from mmreason.tasks.mrag.kb import KnowledgeBases, terms
    from mmreason.tasks.mrag.sources import Item

    items = [
        Item(f"text:{k}", "text", f"T{k}", text)
        for k, text in enumerate(
            ["argon was discovered in 1894", "alaska became a state in 1959", "wheat cost more in 1800"]
        )
    ]
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + sorted({w for i in items for w in terms(f"{i.title} {i.text}")})
    raw = Tokenizer(models.WordLevel({w: n for n, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]").save_pretrained(tmp_path)
    torch.manual_seed(0)
    BertModel(
        BertConfig(
            vocab_size=len(words),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
    ).save_pretrained(tmp_path)
    kb = KnowledgeBases(items, dense_model=str(tmp_path))
    hits = kb.search("Text Retriever", "T1: alaska became a state in 1959", k=2, token_budget=100)
    assert len(hits) == 2 and hits[0].item_id == "text:1" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].score >= hits[1].score


def test_building_without_the_source_packages_says_what_to_install(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gensim", None)  # import gensim -> ImportError
    with pytest.raises(KnowledgeBaseError, match=r"mmreason\[mrag\]"):
        build_index(tmp_path / "idx")
    assert not (tmp_path / "idx" / "manifest.json").exists()
