"""MMLongBench-Doc's scoring rules on hand-written predictions of every answer format, each checked against a
value worked out by hand from the rules (mmlb_score's docstring); then the set-level accuracy and F1, and the
pack's per-question metrics whose means give them."""

from __future__ import annotations

import math

import pytest
from mmlb_fixtures import accuracy_and_f1

from mmreason.eval.metrics import summarize
from mmreason.rewards.mmlongbench import clean, score
from mmreason.tasks.docseeker.alr import answer_block
from mmreason.tasks.mmlongbench_doc.scoring import f1_of, mmlongbench_metrics
from mmreason.types import Sample

CASES = [
    # Int: int(reference) == int(float(prediction))
    ("12", "12.0", "Int", 1.0),
    ("12", "13", "Int", 0.0),
    ("12", "twelve", "Int", 0.0),
    # Float, reference 3.5 (also read as 0.035 and 350):
    ("3.5", "3.5%", "Float", 1.0),  # "%" cleaned away: 3.5 == 3.5
    ("3.5", "0.035", "Float", 1.0),  # the percentage variant r / 100 = 0.035
    ("3.5", "3.52", "Float", 1.0),  # |3.5 - 3.52| = 0.02 <= 0.01 * 3.52 = 0.0352
    ("3.5", "3.6", "Float", 0.0),  # 0.1 > 0.036; round(., 2): 3.6 != 3.5, != 0.04, != 350
    ("$1,200", "1200", "Float", 0.0),  # "1,200" is not a float: the reference cannot be read, no match
    # Str: exact for the benchmark's patterns, else ANLS (0 at or below 0.5)
    ("Less well-off", "less well off", "Str", 1 - 1 / 13),  # lev("less well-off", "less well off") = 1, max len 13
    ("Paris (France)", "paris", "Str", 1.0),  # "(...)" cleaned away
    ("cat", "dog", "Str", 0.0),  # lev = 3 of 3: 1 - 1 = 0
    ("https://example.com", "https://example.com/", "Str", 0.0),  # a URL: exact only
    ("2019-05", "2019-05", "Str", 1.0),  # YYYY-MM: exact
    ("555-1234", "555 1234", "Str", 0.0),  # a phone number: exact only (ANLS would give 0.875)
    # List: same length, cleaned and sorted; numbers exactly, else the minimum ANLS
    ("['Acme', 'Zenith']", "['zenith', 'acme']", "List", 1.0),
    ("['Acme', 'Zenith']", "['acme', 'zenit']", "List", 1 - 1 / 6),  # min(1, 1 - lev("zenith","zenit")/6)
    ("['Acme', 'Zenith']", "['acme']", "List", 0.0),  # lengths differ
    ("['12', '7']", '["7", "12"]', "List", 1.0),  # numbers: "12-7" == "12-7"
    ("['12', '7']", "['7', '13']", "List", 0.0),  # "12-7" != "13-7"
    # None: only "Not answerable" answers it
    ("Not answerable", "Not answerable", "None", 1.0),
    ("Not answerable", "42", "None", 0.0),  # lev = 14 of 14
]


@pytest.mark.parametrize(("reference", "prediction", "fmt", "expected"), CASES)
def test_each_format_scores_as_worked_by_hand(reference, prediction, fmt, expected):
    assert score(reference, prediction, fmt) == pytest.approx(expected)


def test_clean_and_unknown_format():
    assert clean(' "$45%" ') == "45" and clean("Total (approx.) ") == "total"
    with pytest.raises(ValueError, match="unknown answer_format 'Bool'"):
        score("1", "1", "Bool")
    assert score("12", "12.0", "int") == 1.0 and score("cat", "dog", "str") == 0.0  # the loader's own names
    assert score("['a']", "[" * 5000 + "]" * 5000, "List") == 0.0  # hostile nesting is read as one string


def _completion(answer: str) -> str:
    return answer_block([1], answer)


# (reference, format, prediction, score): worked by hand for the set-level check below
ROWS = [
    ("7", "Int", "7", 1.0),  # answerable, right
    ("7", "Int", "8", 0.0),  # answerable, wrong
    ("7", "Int", "Not answerable", 0.0),  # answerable, declined
    ("Not answerable", "None", "Not answerable", 1.0),  # unanswerable, declined
    ("Not answerable", "None", "5", 0.0),  # unanswerable, answered
    ("Not answerable", "None", "x", 0.0),
]  # unanswerable, answered


def test_accuracy_and_f1_by_hand():
    """acc = 2 / 6. Answerable A = rows 1-3, recall = 1 / 3; answered P = rows 1, 2, 5, 6 (not "Not
    answerable"), precision = sum_A score / |P| = 1 / 4; F1 = 2 * (1/4) * (1/3) / (1/4 + 1/3) = 2 / 7."""
    rows = [(score(ref, pred, fmt), ref, pred) for ref, fmt, pred, _ in ROWS]
    assert [r[0] for r in rows] == [r[3] for r in ROWS]
    acc, f1 = accuracy_and_f1(rows)
    assert acc == pytest.approx(1 / 3) and f1 == pytest.approx(2 / 7)


def test_pack_metrics_give_the_same_accuracy_and_f1():
    """The per-question metrics' means are the benchmark's accuracy, recall and precision; the derived f1
    combines them; the breakdowns apply where they should (NaN elsewhere)."""
    metrics = mmlongbench_metrics()
    samples = [
        Sample(
            id=str(i),
            messages=[],
            answer=ref,
            meta={
                "answer_format": fmt,
                "evidence_pages": [-1] if fmt == "None" else [3],
                "evidence_sources": ["Table"] if fmt == "Int" else [],
                "num_pages": 40,
                "retrieved_pages": [1, 3] if i == 0 else [1, 2],
            },
        )
        for i, (ref, fmt, _, _) in enumerate(ROWS)
    ]
    scores = {
        name: [fn(s, _completion(pred)) for s, (_, _, pred, _) in zip(samples, ROWS)] for name, fn in metrics.items()
    }
    means = {name: summarize(values).value for name, values in scores.items()}
    assert means["accuracy"] == pytest.approx(1 / 3)
    assert means["answerable_recall"] == pytest.approx(1 / 3) and means["answered_precision"] == pytest.approx(1 / 4)
    assert f1_of(means) == pytest.approx(2 / 7)
    assert means["accuracy_format_int"] == pytest.approx(1 / 3) and means["accuracy_format_none"] == pytest.approx(
        1 / 3
    )
    assert means["accuracy_source_table"] == pytest.approx(1 / 3) and means["accuracy_source_chart"] is None
    assert means["accuracy_single_page"] == pytest.approx(1 / 3) and means["accuracy_cross_page"] is None
    assert means["accuracy_unanswerable"] == pytest.approx(1 / 3)
    assert means["accuracy_len_21_50"] == pytest.approx(1 / 3) and means["accuracy_len_le20"] is None
    assert scores["retrieval_recall"][:3] == [1.0, 0.0, 0.0] and math.isnan(scores["retrieval_recall"][3])
    assert scores["evidence_f1"][0] == 0.0  # cited page 1 against gold page 3
