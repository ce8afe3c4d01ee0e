"""MMLongBench-Doc and its scorer on hostile input (issue 38, point 8): linear patterns, the answer cap, one row
reader, bad rows as one line or a counted skip, and the published rows with out-of-range evidence pages scored
on their answers and left out of the evidence-page metrics only."""

from __future__ import annotations

import json
import math
import random
import re
import time

import pytest
from mmlb_fixtures import published_row, text_pdf

from mmreason.eval.tasks import load_task
from mmreason.rewards.mmlongbench import (
    FORMATS,
    as_list,
    clean,
    is_exact_pattern,
    score,
)
from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.mmlongbench_doc.scoring import mmlongbench_metrics

N = 100_000
ADVERSARIAL = [
    "a" + " " * N + "a",
    " " * N + "(",
    "(" * N,
    "(" + " " * N,
    "1" * N + "x",
    "1" * N + "-" + "1" * N + "x",
    "1 " * (N // 2) + "x",
    "a@" + "a." * (N // 2) + "!",
    "a" * N + "@",
    "." * N + "@a.b!",
    "'" * N,
    "$" * N + "%" * N,
    "[" * N,
    "[" + "1," * (N // 2),
    "page" + " " * N,
    "https://" + "/" * N,
    "\t\n" * (N // 2) + "(x",
    "ab" * (N // 2),
]


def _reference_clean(text) -> str:
    """The published get_clean_string, regexes and all (quadratic on long runs of spaces: short inputs only)."""
    s = str(text).lower().strip()
    s = re.sub(r"\s*\([^)]*\)", "", s).strip()
    s = re.sub(r"^['\"]|['\"]$", "", s).strip()
    return s.lstrip("$").strip().rstrip("%").strip()


def test_every_scorer_pattern_is_linear_on_100kb_adversarial_input():
    """Each scorer function on each 100 kB input (as reference and as prediction, in every format) under 0.1 s;
    the linear clean() equals the published regexes on 20,000 random short strings."""
    slow = []
    for text in ADVERSARIAL:
        calls = [(fn, (text,)) for fn in (clean, is_exact_pattern, as_list)]
        calls += [(score, ("a short reference", text, f)) for f in FORMATS]
        calls += [(score, (text[:1000], text, f)) for f in FORMATS]
        for fn, args in calls:
            start = time.perf_counter()
            fn(*args)
            if (took := time.perf_counter() - start) > 0.1:
                slow.append(f"{fn.__name__}{tuple(len(a) for a in args)} on {text[:12]!r}...: {took:.2f} s")
    assert not slow, slow
    rng = random.Random(0)
    for _ in range(20_000):
        s = "".join(rng.choice("aB1 ()\t\n'\"$%") for _ in range(rng.randint(0, 14)))
        assert clean(s) == _reference_clean(s), repr(s)


def _bench(folder, rows) -> str:
    text_pdf(folder / "documents" / "ok.pdf", ["alpha", "beta", "gamma"])
    path = folder / "samples.json"
    path.write_text(json.dumps(rows))
    return str(path)


def test_json_file_goes_through_the_row_reader(tmp_path):
    """A non-UTF-8 byte and a lone surrogate are one line naming the file and line (not a traceback or a crash
    later in the eval); null, "Integer", a list answer and a 5,000-character answer are counted skips."""
    path = _bench(tmp_path, [published_row("ok.pdf", "q", "a", "[1]", "Str")])
    data = open(path, "rb").read()
    open(path, "wb").write(data.replace(b'"q"', b'"q\xff"'))
    with pytest.raises(ValueError, match=re.escape(path) + r".*line 1: byte 0xff is not UTF-8 text"):
        docseeker_load(path, "eval")
    open(path, "wb").write(data.replace(b'"q"', b'"q\\ud800"'))
    with pytest.raises(ValueError, match=r"field 'question' holds a lone surrogate"):
        docseeker_load(path, "eval")
    good = published_row("ok.pdf", "q", "a", "[1]", "Str")
    rows = [
        good,
        {**good, "answer_format": None},
        {**good, "answer_format": "Integer"},
        {**good, "answer": ["a"]},
        {**good, "answer": "x" * 5000},
        {**good, "answer_format": 3},
    ]
    path = _bench(tmp_path, rows)
    samples = docseeker_load(path, "eval", max_bad_fraction=0.9)
    assert [s.id for s in samples] == ["0:ok.pdf"]
    assert samples.skipped == {"unknown answer_format": 3, "answer not text": 1, "answer too long": 1}
    assert any("answer has 5,000 characters, over the cap of 1,000" in e for e in samples.errors)
    (tmp_path / "one.json").write_text(json.dumps([rows[2]]))
    with pytest.raises(ValueError, match=r"one\.json: row 0 \(doc_id 'ok\.pdf'\): unknown answer_format 'Integer'"):
        docseeker_load(str(tmp_path / "one.json"), "eval", doc_dir=str(tmp_path / "documents"), bad_rows="error")
    own = tmp_path / "own.jsonl"  # the loader's own row shape: "Integer" would fail every metric later
    own.write_text(
        json.dumps(
            {
                "id": "x",
                "document": "documents/ok.pdf",
                "question": "q",
                "answer": "1",
                "evidence_pages": [1],
                "answer_format": "Integer",
            }
        )
        + "\n"
    )
    with pytest.raises(ValueError, match=r"own\.jsonl: row 0 \(id 'x'\): unknown answer_format 'Integer'"):
        docseeker_load(str(own), "eval", bad_rows="error")


def test_out_of_range_evidence_is_scored_on_the_answer_and_left_out_of_evidence_metrics(tmp_path):
    """Evidence page 0 and page 7 of a 3-page PDF, as published: both kept and scored on their answers; the
    evidence metrics skip them (NaN), the single-page breakdown counts them by the list as published, and the
    results file says how many (partial_rows) beside the skipped rows."""
    rows = [
        published_row("ok.pdf", "What?", "beta", "[2]", "Str"),
        published_row("ok.pdf", "Q0", "alpha", "[0]", "Str"),
        published_row("ok.pdf", "Q7", "7", "[7]", "Int"),
        published_row("gone.pdf", "q", "a", "[1]", "Str"),
    ]
    path = _bench(tmp_path, rows)
    samples = docseeker_load(path, "eval")
    assert [s.id for s in samples] == ["0:ok.pdf", "1:ok.pdf", "2:ok.pdf"]
    assert samples.skipped == {"missing PDF": 1} and list(samples.partial.values()) == [2]
    metrics = mmlongbench_metrics()
    answers = ["<answer>beta</answer> Page 2", "<answer>alpha</answer> Page 1", "<answer>7</answer> Page 3"]
    for sample, completion in zip(samples, answers):
        assert metrics["accuracy"](sample, completion) == 1.0  # scored as the benchmark scores it
        assert metrics["accuracy_single_page"](sample, completion) == 1.0  # one page as published
    assert samples[0].meta["evidence_pages"] == [2] and not math.isnan(metrics["evidence_f1"](samples[0], answers[0]))
    for sample, completion in zip(samples[1:], answers[1:]):
        assert sample.meta["evidence_pages"] == [-1] and "evidence_left_out" in sample.meta
        assert math.isnan(metrics["evidence_f1"](sample, completion))
        assert math.isnan(metrics["evidence_precision"](sample, completion))
        assert math.isnan(metrics["retrieval_recall"](sample, completion))
    described = load_task("mmlongbench_doc", path).describe()
    assert described["n_docs"] == 3 and described["skipped_rows"] == {"missing PDF": 1}
    assert list(described["partial_rows"].values()) == [2]
    assert "left out of the evidence-page metrics" in next(iter(described["partial_rows"]))
