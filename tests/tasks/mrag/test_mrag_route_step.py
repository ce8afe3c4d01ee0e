"""R1-Router step rewards of the MRAG pack: `route_step` (lexical similarity by default, a local embedding model
optionally) and `route_format`."""

from __future__ import annotations

import pytest
from reward_factory import sample, score, traj

from mmreason.rewards.textmatch import token_f1, vqa_normalize
from mmreason.tasks.mrag.rewards import route_step

GOLD_Q = "When was the Eiffel Tower built?"


def step(question, kb):
    return f"<think>need the date</think><sub-question>{question}</sub-question><ret>{kb}</ret>"


def ret_sample(**extra):
    return sample(None, sub_question=GOLD_Q, knowledge_base="Text Retriever", **extra)


def run(text, s=None, **kwargs):
    out = route_step([s or ret_sample()], [traj(text)], **kwargs)
    return {k: v[0] for k, v in out.items()}


def test_exact_gold_step_scores_one():
    # docs/methods/packs.md#r1-router: exact gold output -> R_ret = 1.0
    assert run(step(GOLD_Q, "Text Retriever")) == {"step": 1.0, "similarity": 1.0, "kb_match": 1.0}


def test_right_kb_wrong_question_is_half_plus_half_similarity():
    other = "Who designed the Eiffel Tower?"
    sim = token_f1(vqa_normalize(other), vqa_normalize(GOLD_Q))
    assert 0 < sim < 1
    assert run(step(other, "Text Retriever"))["step"] == pytest.approx(0.5 + 0.5 * sim)
    assert run(step(GOLD_Q, "Table Retriever"))["step"] == pytest.approx(0.5)  # right question, wrong KB


def test_several_or_unknown_kbs_score_zero():
    # "<ret>Text Retriever, Table Retriever</ret>" -> KB term 0 and (format gate) the whole step 0
    assert run(step(GOLD_Q, "Text Retriever, Table Retriever")) == {
        "step": 0.0,
        "similarity": 0.0,
        "kb_match": 0.0,
    }
    assert run(step(GOLD_Q, "Google"))["step"] == 0.0
    assert run("When was it built?")["step"] == 0.0


def test_none_sub_question_matches_none():
    s = sample(None, sub_question="None", knowledge_base="None")
    assert run(step("None", "None"), s)["step"] == 1.0


def test_final_step_uses_the_answer_rule():
    s = sample("1889", step_type="ans")
    assert run("<think>found it</think><answer>It was built in 1889.</answer>", s)["step"] == 1.0
    assert run("<think>found it</think><answer>1890</answer>", s)["step"] == 0.0
    assert run("<answer>1889</answer>", s)["step"] == 0.0  # missing <think>


def test_answer_decision_weight_credits_answering_on_a_final_step():
    s = sample("1889", step_type="ans")
    wrong, right = "<think>so</think><answer>1890</answer>", "<think>so</think><answer>1889</answer>"
    retrieves = step(GOLD_Q, "Text Retriever")
    assert run(wrong, s)["step"] == run(retrieves, s)["step"] == 0.0  # the paper's rule: the route is not scored
    assert run(wrong, s, answer_decision_weight=0.3)["step"] == pytest.approx(0.3)
    assert run(right, s, answer_decision_weight=0.3)["step"] == pytest.approx(1.0)
    assert run(retrieves, s, answer_decision_weight=0.3)["step"] == 0.0
    with pytest.raises(ValueError, match="answer_decision_weight"):
        run(wrong, s, answer_decision_weight=1.5)
    assert run("<answer>1889</answer>", s)["kb_match"] is None


def test_tfidf_similarity():
    assert run(step(GOLD_Q, "Text Retriever"), similarity="tfidf")["similarity"] == pytest.approx(1.0)
    partial = run(step("When was the Louvre built?", "Text Retriever"), similarity="tfidf")["similarity"]
    assert 0 < partial < 1
    with pytest.raises(ValueError):
        run(step(GOLD_Q, "Text Retriever"), similarity="bleu")


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny BERT encoder and word-level tokenizer, saved and loaded through from_pretrained."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + sorted(set(vqa_normalize(GOLD_Q + " who designed louvre").split()))
    raw = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]")
    torch.manual_seed(0)
    model = BertModel(
        BertConfig(
            vocab_size=len(words),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
    )
    path = tmp_path_factory.mktemp("encoder")
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return str(path)


def test_embedding_similarity_from_a_local_encoder(encoder_dir):
    same = run(step(GOLD_Q, "Text Retriever"), embedding_model=encoder_dir)
    assert same["similarity"] == pytest.approx(1.0, abs=1e-5)
    assert same["step"] == pytest.approx(1.0, abs=1e-5)
    other = run(step("who designed louvre", "Text Retriever"), embedding_model=encoder_dir, pooling="mean")
    assert 0.0 <= other["similarity"] < 1.0 - 1e-4


def test_route_format():
    step = "<think>need the year</think><sub-question>When was X built?</sub-question><ret>Text Retriever</ret>"
    assert score("route_format", step) == 1.0
    assert score("route_format", "<think>done</think><answer>1889</answer>") == 1.0
    assert score("route_format", step.replace("Text Retriever", "Text Retriever, Table Retriever")) == 0.0
    assert score("route_format", step.replace("Text Retriever", "Web Search")) == 0.0
    assert score("route_format", step + "<answer>x</answer>") == 0.0
