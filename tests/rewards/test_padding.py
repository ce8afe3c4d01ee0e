"""Padding must not raise a wrong answer's score, in any string-similarity reward or eval metric.

The hole (ANLS as lmms-eval computes it): the edit distance was taken on whitespace-collapsed text but
divided by the raw length, so 'berlin' + 60 spaces scored 1 - 5/67 = 0.91 against 'paris' (0 without
the padding). Each scorer below is run on a wrong (or half-right) answer, then on the same answer padded
with whitespace of every kind or with filler characters, inside and around the answer; the padded score
may never exceed the unpadded one.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from reward_factory import sample, score, traj

from mmreason.rewards.textmatch import anls_score, token_f1, vqa_normalize
from mmreason.tasks.docseeker.scoring import docseeker_accuracy, docseeker_anls
from mmreason.tasks.mrag.rewards import route_step
from mmreason.tasks.mrag.scoring import answer_em, answer_f1
from mmreason.types import Sample

FILLERS = [" ", "\t", "\n", "\u00a0", "\u3000", "\u2003", ".", "_", "-", "*", "\u200b", "~", "'"]
COUNTS = [1, 10, 60, 200, 3000]


def paddings(answer: str) -> list[str]:
    out = []
    for fill in FILLERS:
        for n in COUNTS:
            out += [answer + fill * n, fill * n + answer, answer[:3] + fill * n + answer[3:]]
    out.append(answer + " " * 60 + ".")  # the issue's repro
    out.append(answer + " " * 2500 + " and more words after a long gap")
    return out


def _answer_dict(answer: str) -> str:
    return '<answer>{"evidence_pages": [2], "answer": ' + json.dumps(answer) + "}</answer>"


def _ds_sample(answer: str) -> Sample:
    return Sample(
        id="d",
        messages=[{"role": "user", "content": "q"}],
        answer=answer,
        meta={"evidence_pages": [2], "num_pages": 12},
    )


def _mrag_final(answer: str) -> Sample:
    return Sample(
        id="m", messages=[{"role": "user", "content": "q"}], answer=answer, meta={"step_type": "ans", "step_index": 1}
    )


def _route_similarity(question: str) -> float:
    text = f"<think>need it</think><sub-question>{question}</sub-question><ret>Text Retriever</ret>"
    s = sample(None, sub_question="When was the Eiffel Tower built?", knowledge_base="Text Retriever")
    return route_step([s], [traj(text)])["similarity"][0]


def _route_tfidf(question: str) -> float:
    text = f"<think>need it</think><sub-question>{question}</sub-question><ret>Text Retriever</ret>"
    s = sample(None, sub_question="When was the Eiffel Tower built?", knowledge_base="Text Retriever")
    return route_step([s], [traj(text)], similarity="tfidf")["similarity"][0]


# name -> (scorer of an answer string, a wrong or half-right answer, the reference)
SCORERS: dict[str, tuple[Callable[[str, str], float], str, str]] = {
    "anls_score": (lambda a, ref: anls_score(a, [ref], 0.0), "berlin", "paris"),
    "anls_score[near]": (lambda a, ref: anls_score(a, [ref], 0.5), "pariss", "paris"),
    "reward anls": (lambda a, ref: score("anls", f"<answer>{a}</answer>", ref), "pariX", "paris"),
    "reward anls[threshold 0]": (
        lambda a, ref: score("anls", f"<answer>{a}</answer>", ref, kwargs={"threshold": 0.0}),
        "berlin",
        "paris",
    ),
    "reward anls[answer_dict]": (
        lambda a, ref: score("anls", _answer_dict(a), ref, kwargs={"extract": "answer_dict", "threshold": 0.0}),
        "berlin",
        "paris",
    ),
    "docseeker_anls": (lambda a, ref: docseeker_anls(_ds_sample(ref), f"<answer>{a}</answer>"), "pariXY", "paris"),
    "docseeker_accuracy": (
        lambda a, ref: docseeker_accuracy(_ds_sample(ref), f"<answer>{a}</answer>"),
        "pXXXs",
        "paris",
    ),
    "token_f1": (
        lambda a, ref: token_f1(vqa_normalize(a), vqa_normalize(ref)),
        "eiffel tower rome",
        "eiffel tower paris",
    ),
    "reward token_recall": (
        lambda a, ref: score("token_recall", f"<answer>{a}</answer>", ref),
        "big red bus",
        "big red bus paris london rome",
    ),
    "reward vqa_exact": (lambda a, ref: score("vqa_exact", f"<answer>{a}</answer>", ref), "berlin", "paris"),
    "reward relaxed_accuracy": (
        lambda a, ref: score("relaxed_accuracy", f"<answer>{a}</answer>", ref),
        "berlin",
        "paris",
    ),
    "mrag answer_f1": (
        lambda a, ref: answer_f1(_mrag_final(ref), f"<think>x</think><answer>{a}</answer>"),
        "eiffel tower rome",
        "eiffel tower paris",
    ),
    "mrag answer_em": (
        lambda a, ref: answer_em(_mrag_final(ref), f"<think>x</think><answer>{a}</answer>"),
        "berlin",
        "paris",
    ),
    "route_step similarity[token_f1]": (lambda a, ref: _route_similarity(a), "Who designed the Eiffel Tower?", ""),
    "route_step similarity[tfidf]": (lambda a, ref: _route_tfidf(a), "Who designed the Eiffel Tower?", ""),
}


@pytest.mark.parametrize("name", list(SCORERS))
def test_padding_never_raises_a_wrong_answers_score(name):
    scorer, answer, ref = SCORERS[name]
    base = scorer(answer, ref)
    assert base is not None and base < 1.0, f"{name}: the unpadded answer must be wrong or half right"
    raised = [(p, s) for p in paddings(answer) if (s := scorer(p, ref)) is not None and s > base + 1e-12]
    assert not raised, f"{name}: {len(raised)} paddings raise {base:.3f}, e.g. {raised[0][0]!r} -> {raised[0][1]:.3f}"


def test_the_issues_repros_score_zero():
    # Before: 0.910 (1 - 6/67: lev('paris', 'berlin .') / raw length 67), 0.975 and 1.0.
    assert score("anls", "<answer>berlin" + " " * 60 + ".</answer>", "paris") == 0.0
    padded = '<answer>{"evidence_pages": [1], "answer": "berlin' + " " * 200 + '"}</answer>'
    assert score("anls", padded, "paris", kwargs={"extract": "answer_dict"}) == 0.0
    # 'pXXis' is 2 edits from 'paris' (ANLS 0.6 would pass 0.5; with 'pXXXs', 3 edits, 0.4 must not)
    assert docseeker_accuracy(_ds_sample("paris"), "<answer>pXXXs" + " " * 10 + "</answer>") == 0.0
    # Before: 1.0 (1 - 5/14 on the raw length) for an answer with nothing of 'paris' in it.
    assert docseeker_accuracy(_ds_sample("paris"), _answer_dict("xyz" + " " * 10 + ".")) == 0.0
    assert score(
        "anls", _answer_dict("berlin" + " " * 200 + "."), "paris", kwargs={"extract": "answer_dict", "threshold": 0.0}
    ) == pytest.approx(1 - 6 / 8)  # was 0.971


def test_whitespace_normalised_answers_still_match():
    # Normalising once keeps the legitimate cases: case, surrounding and repeated whitespace.
    assert anls_score("  Paris\n", ["paris"]) == 1.0
    assert anls_score("new\u00a0 york", ["New York"]) == 1.0
    assert anls_score("Pari", ["Paris"]) == pytest.approx(0.8)
    assert vqa_normalize("the  two\tdogs" + " " * 3000 + "ran") == "2 dogs ran"
