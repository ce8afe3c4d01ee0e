"""Pack loaders under malformed and oversized rows: answers kept exactly as written, every bad field a one-line
error naming the file, the row and the field (once each, and the right pack), list fields over their caps
refused naming the cap, and a broken PDF failing its own document rather than the load."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from mmreason.tasks.docseeker.data import docseeker_load
from mmreason.tasks.medscope.data import medscope_load
from mmreason.tasks.mrag.data import mrag_load
from mmreason.tasks.shapes.data import shapes_load
from mmreason.tasks.videoqa.data import videoqa_load
from mmreason.tasks.vision.data import vision_load


def _mp4(path: Path, frames: int = 8, fps: int = 4, size: int = 32) -> Path:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for k in range(frames):
            image = np.full((size, size, 3), 20 * k, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        container.mux(stream.encode())
    return path


def _base(pack: str, folder: Path) -> dict:
    """A valid row of ``pack`` (media paths relative to the data file)."""
    if pack == "medscope" and not (folder / "v.mp4").exists():
        _mp4(folder / "v.mp4")
    return {
        "mrag": {"id": "r", "question": "q?", "answer": "a", "steps": [{"sub_question": "s?", "kb": "Text Retriever"}]},
        "videoqa": {"id": "r", "video": "v.mp4", "question": "q?", "answer": "a", "answer_type": "free"},
        "medscope": {
            "id": "r",
            "video": "v.mp4",
            "question": "q?",
            "answer": "a",
            "task_type": "qa",
            "evidence_windows": [[0.0, 1.0]],
        },
        "docseeker": {
            "id": "r",
            "document": ["p1.png", "p2.png"],
            "question": "q?",
            "answer": "a",
            "evidence_pages": [1],
        },
        "vision": {"id": "r", "image": "i.png", "question": "q?", "answer": "a", "answer_type": "free-form"},
        "shapes": {"id": "r", "image": "i.png", "question": "q?", "answer": "a"},
    }[pack]


# DocSeeker skips a bad row by default (counted, named in the log); bad_rows=error raises its message instead.
LOADERS = {
    "mrag": mrag_load,
    "videoqa": videoqa_load,
    "medscope": medscope_load,
    "docseeker": functools.partial(docseeker_load, bad_rows="error"),
    "vision": vision_load,
    "shapes": shapes_load,
}


def _write(folder: Path, rows: list, name: str = "rows.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("pack", sorted(LOADERS))
def test_answers_are_kept_exactly_as_written_in_a_mixed_column(tmp_path, pack):
    """A column holding JSON numbers and strings: through ``datasets`` the strings became numbers ("007" -> 7,
    "1.10" -> 1.1) and exact match was scored against the changed value. Now each answer is as written."""
    written = [5, "007", "1.10", "x"]
    rows = [dict(_base(pack, tmp_path), id=f"r{k}", answer=a) for k, a in enumerate(written)]
    if pack == "videoqa":
        rows = [dict(r, answer_type="numeric") for r in rows[:3]] + [rows[3]]
    samples = LOADERS[pack](str(_write(tmp_path, rows)), "train")
    first = {}
    for s in samples:  # mrag unrolls a row into step samples: one answer per row
        first.setdefault(s.id.split("#")[0], s.answer)
    answers = [first[f"r{k}"] for k in range(4)]
    assert [str(a) for a in answers] == ["5", "007", "1.10", "x"]
    assert "007" in answers and "1.10" in answers  # the strings themselves, not numbers printed back


MALFORMED = [  # (pack, change to the valid row, field the message must name, what it must say)
    ("docseeker", {"conversations": ["human: q", "gpt: a"], "question": None}, "conversations", "list of"),
    ("docseeker", {"document": 7}, "document", "PDF path or a list of page image paths"),
    ("docseeker", {"document": ["p1.png", 3]}, "document", "PDF path or a list of page image paths"),
    ("docseeker", {"evidence_pages": ["a"]}, "evidence page", "not a page number"),
    ("docseeker", {"question": ["q"]}, "question", "JSON array, not a string"),
    ("docseeker", {"evidence_base": "one"}, "evidence_base", "must be 0 or 1"),
    ("medscope", {"duration": [1, 2]}, "duration", "not a number of seconds"),
    ("medscope", {"duration": -60}, "duration", "not in (0, 86400] seconds"),
    ("medscope", {"duration": 1e300}, "duration", "not in (0, 86400] seconds"),
    ("medscope", {"duration": "abc"}, "duration", "not a number of seconds"),
    ("medscope", {"video": 5}, "video", "JSON number, not a string"),
    ("medscope", {"evidence_windows": [[0, "x"]]}, "evidence window", "not [start, end]"),
    ("medscope", {"options": {"A": "x"}}, "options", "list of 2..10"),
    ("mrag", {"image": 5}, "image", "JSON number, not a string"),
    ("mrag", {"question": {"text": "q"}}, "question", "JSON object, not a string"),
    ("mrag", {"steps": "two steps"}, "steps", "not a list"),
    ("mrag", {"steps": [{"sub_question": "s?", "kb": "Web"}]}, "kb", "is not one of"),
    ("mrag", {"thinks": "because"}, "thinks", "list of strings"),
    ("videoqa", {"video": ["a.mp4"]}, "video", "JSON array, not a string"),
    ("videoqa", {"answer_type": "numeric", "answer": "many"}, "numeric answer", "not a number"),
    ("videoqa", {"window": "soon"}, "window", "not [start, end]"),
]


@pytest.mark.parametrize(
    "pack, change, field, says", MALFORMED, ids=[f"{p}-{f}-{k}" for k, (p, _, f, _) in enumerate(MALFORMED)]
)
def test_a_malformed_field_is_one_line_naming_the_file_row_and_field(tmp_path, pack, change, field, says):
    good = _base(pack, tmp_path)
    bad = {k: v for k, v in {**good, **change}.items() if v is not None}
    path = _write(tmp_path, [dict(good, id="ok"), dict(bad, id="bad")])
    with pytest.raises(ValueError) as info:
        LOADERS[pack](str(path), "train")
    message = str(info.value)
    assert "\n" not in message
    assert message.count(str(path)) == 1, message  # the file, once
    assert "row 1 (id 'bad')" in message and field in message and says in message, message
    assert not ({"videoqa", "medscope", "mrag", "docseeker"} - {pack}) & set(message.split()), message


@pytest.mark.parametrize("pack", ["docseeker", "medscope", "mrag", "videoqa"])
def test_file_level_errors_name_the_pack_file_and_line(tmp_path, pack):
    good = json.dumps(_base(pack, tmp_path))
    cases = {
        "surrogate": (
            good + "\n" + good[:-1] + ', "note": "\\ud800"}\n',
            r"line 2: field 'note' holds a lone surrogate",
        ),
        "not_json": (good + "\n{oops\n", "line 2 is not JSON"),
        "not_utf8": None,
        "not_object": (good + "\n[1, 2]\n", "line 2 is a JSON list, not an object"),
    }
    for name, case in cases.items():
        path = tmp_path / f"{name}.jsonl"
        if case is None:
            path.write_bytes(good.encode() + b"\n" + b'{"id": "\xff"}\n')
            case = (None, "line 2: byte 0xff is not UTF-8 text")
        else:
            path.write_text(case[0])
        with pytest.raises(ValueError) as info:
            LOADERS[pack](str(path), "train")
        message = str(info.value)
        assert message.startswith(f"{pack} data file {str(path)!r}: ") and case[1] in message, message
        assert "\n" not in message and message.count(str(path)) == 1


CAPS = [  # (pack, oversized change, field, the cap's name in the message)
    (
        "mrag",
        {"steps": [{"sub_question": f"s{k}?", "kb": "Text Retriever"} for k in range(10_000)]},
        "steps",
        "over the cap of 16 (MAX_STEPS",
    ),
    ("mrag", {"thinks": ["t"] * 18}, "thinks", "over the cap of 17"),
    (
        "medscope",
        {"evidence_windows": [[k, k + 0.5] for k in range(33)]},
        "evidence_windows",
        "over the cap of 32 (MAX_EVIDENCE_WINDOWS",
    ),
    ("medscope", {"options": [str(k) for k in range(11)], "answer": "A"}, "options", "over the cap of 10"),
    (
        "videoqa",
        {"options": [str(k) for k in range(5_000)], "answer": "A", "answer_type": "mcq"},
        "options",
        "over the cap of 10",
    ),
    (
        "docseeker",
        {"conversations": [{"from": "human", "value": "q"}] * 17, "question": None},
        "conversations",
        "over the cap of 16 (MAX_TURNS",
    ),
    ("docseeker", {"document": ["p.png"] * 10_001}, "document", "over the cap of 10000 (MAX_PAGE_ENTRIES"),
    ("docseeker", {"evidence_pages": [1] * 10_001}, "evidence_pages", "over the cap of 10000 (MAX_PAGE_ENTRIES"),
]


@pytest.mark.parametrize("pack, change, field, cap", CAPS, ids=[f"{p}-{f}" for p, _, f, _ in CAPS])
def test_a_row_over_a_cap_is_refused_naming_the_cap(tmp_path, pack, change, field, cap):
    """One mrag row of 10,000 steps took 43 s and 7.1 GB to load (its unrolled prompts grow quadratically)."""
    row = {k: v for k, v in {**_base(pack, tmp_path), **change}.items() if v is not None}
    path = _write(tmp_path, [row])
    with pytest.raises(ValueError) as info:
        LOADERS[pack](str(path), "train")
    message = str(info.value)
    assert f"{path}: row 0 (id 'r'): {field} has " in message and cap in message, message


def test_a_broken_pdf_fails_its_document_not_the_load(tmp_path):
    from mmreason.tasks.docseeker.synth import generate

    generate(tmp_path, 1, 2, 2, seed=0, page_size=(170, 220))
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\nnot really a pdf")
    rows = [
        {"id": "good", "document": "doc-00000.pdf", "question": "q?", "answer": "a", "evidence_pages": [1]},
        {"id": "broken", "document": "broken.pdf", "question": "q?", "answer": "a", "evidence_pages": [2]},
    ]
    path = _write(tmp_path, rows, "docs.jsonl")
    (good,) = samples = docseeker_load(str(path), "test")  # the broken document is skipped and counted
    assert good.id == "good" and good.meta["num_pages"] == 2
    assert samples.skipped == {"unreadable PDF": 1} and "broken.pdf" in samples.errors[0]
    with pytest.raises(ValueError, match=r"docs.jsonl: row 1: cannot read PDF '.*broken.pdf'"):  # bad_rows=error
        docseeker_load(str(path), "test", bad_rows="error")
