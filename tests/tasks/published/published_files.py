"""Small files in each benchmark's published schema, written by the tests: tiny PNGs, the repositories' JSON
layouts, the Hugging Face parquet layouts (image columns as ``{"bytes", "path"}`` structs), two short clips with
an ``.srt``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from mmreason.examples import write_parquet
from mmreason.media.video_write import write_mp4


def png(path: Path | None = None, colour: tuple[int, int, int] = (200, 30, 30), size: int = 28) -> bytes:
    """A flat-colour PNG (written to ``path`` when given); its bytes."""
    buffer = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buffer, format="PNG")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buffer.getvalue())
    return buffer.getvalue()


# ---- MathVista: data/testmini.json (an object keyed by pid) and images/ -----------------------------------


def _meta(category, task, context, grade, skills, source, language="english"):
    return {
        "split": "testmini",
        "language": language,
        "img_width": 28,
        "img_height": 28,
        "source": source,
        "category": category,
        "task": task,
        "context": context,
        "grade": grade,
        "skills": skills,
    }


MATHVISTA_ROWS = {
    "1": {
        "question": "What is the length of the segment?",
        "image": "images/1.png",
        "choices": None,
        "unit": "cm",
        "precision": 1,
        "answer": "1.2",
        "question_type": "free_form",
        "answer_type": "float",
        "pid": "1",
        "metadata": _meta(
            "math-targeted-vqa",
            "geometry problem solving",
            "geometry diagram",
            "high school",
            ["geometry reasoning", "arithmetic reasoning"],
            "Geometry3K",
        ),
    },
    "2": {
        "question": "How many bars are there?",
        "image": "images/2.png",
        "choices": None,
        "unit": None,
        "precision": None,
        "answer": "7",
        "question_type": "free_form",
        "answer_type": "integer",
        "pid": "2",
        "metadata": _meta(
            "general-vqa",
            "figure question answering",
            "bar chart",
            "elementary school",
            ["arithmetic reasoning", "statistical reasoning"],
            "FigureQA",
        ),
    },
    "3": {
        "question": "Which shape is red?",
        "image": "images/3.png",
        "choices": ["the square", "the circle", "the triangle"],
        "unit": None,
        "precision": None,
        "answer": "the circle",
        "question_type": "multi_choice",
        "answer_type": "text",
        "pid": "3",
        "metadata": _meta(
            "general-vqa",
            "visual question answering",
            "synthetic scene",
            "elementary school",
            ["numeric commonsense"],
            "CLEVR-Math",
        ),
    },
    "4": {
        "question": "List the values of the three bars.",
        "image": "images/4.png",
        "choices": None,
        "unit": None,
        "precision": None,
        "answer": "[1, 2, 3]",
        "question_type": "free_form",
        "answer_type": "list",
        "pid": "4",
        "metadata": _meta(
            "math-targeted-vqa",
            "figure question answering",
            "bar chart",
            "high school",
            ["statistical reasoning"],
            "FigureQA",
        ),
    },
    "5": {
        "question": "What is the probability?",
        "image": "images/5.png",
        "choices": None,
        "unit": None,
        "precision": 2,
        "answer": "0.33",
        "question_type": "free_form",
        "answer_type": "float",
        "pid": "5",
        "metadata": _meta(
            "math-targeted-vqa",
            "math word problem",
            "table",
            "college",
            ["arithmetic reasoning"],
            "TabMWP",
            language="chinese",
        ),
    },
}


def mathvista_repo(root: Path) -> Path:
    """``root/data/testmini.json`` and its ``images/``, as the repository lays them out."""
    data = root / "data"
    for k, pid in enumerate(MATHVISTA_ROWS):
        png(data / "images" / f"{pid}.png", (40 * k, 200, 90))
    path = data / "testmini.json"
    path.write_text(json.dumps(MATHVISTA_ROWS, indent=2))
    return path


def mathvista_parquet(path: Path) -> Path:
    """The Hugging Face layout: a row per problem with ``decoded_image`` bytes and the benchmark's ``query``."""
    rows = []
    for k, row in enumerate(MATHVISTA_ROWS.values()):
        rows.append(
            {
                **row,
                "precision": None if row["precision"] is None else float(row["precision"]),
                "decoded_image": {"bytes": png(colour=(10 * k, 0, 0)), "path": row["image"]},
                "query": f"Hint: answer it.\nQuestion: {row['question']}",
            }
        )
    return write_parquet(path, rows)


# ---- MMMU: one folder per subject of validation-*.parquet ------------------------------------------------


def mmmu_rows() -> list[dict]:
    image = {"bytes": png(), "path": "a.png"}
    blank = {f"image_{n}": None for n in range(1, 8)}
    return [
        {
            **blank,
            "id": "validation_Art_1",
            "question": "Compare <image 1> with <image 2>. Which is older?",
            "options": "['The first', 'The second', 'Both equal', 'Unknown']",
            "explanation": "",
            "image_1": image,
            "image_2": {"bytes": png(colour=(0, 0, 200)), "path": "b.png"},
            "img_type": "['Paintings']",
            "answer": "B",
            "topic_difficulty": "Easy",
            "question_type": "multiple-choice",
            "subfield": "Fine Arts",
        },
        {
            **blank,
            "id": "validation_Art_2",
            "question": "Which option shows <image 1>?",
            "options": "['cat', 'dog', 'horse']",
            "explanation": "",
            "image_1": image,
            "img_type": "['Photos']",
            "answer": "A",
            "topic_difficulty": "Hard",
            "question_type": "multiple-choice",
            "subfield": "Fine Arts",
        },
        {
            **blank,
            "id": "validation_Math_1",
            "question": "<image 1> What is the area?",
            "options": "[]",
            "explanation": "",
            "image_1": image,
            "img_type": "['Diagrams']",
            "answer": "12.5",
            "topic_difficulty": "Medium",
            "question_type": "open",
            "subfield": "Geometry",
        },
        {
            **blank,
            "id": "validation_Math_2",
            "question": "<image 1> Name the theorem.",
            "options": "[]",
            "explanation": "",
            "image_1": image,
            "img_type": "['Diagrams']",
            "answer": "Pythagoras",
            "topic_difficulty": "Easy",
            "question_type": "open",
            "subfield": "Geometry",
        },
    ]


def mmmu_folder(root: Path) -> Path:
    rows = mmmu_rows()
    write_parquet(root / "Art" / "validation-00000-of-00001.parquet", rows[:2])
    write_parquet(root / "Math" / "validation-00000-of-00001.parquet", rows[2:])
    return root


# ---- ChartQA: ChartQA Dataset/test/{test_human,test_augmented}.json and png/ -----------------------------


def chartqa_repo(root: Path) -> Path:
    test = root / "test"
    human = [
        {"imgname": "h1.png", "query": "What is the peak value?", "label": "100"},
        {"imgname": "h2.png", "query": "Which country is highest?", "label": "Japan"},
    ]
    augmented = [{"imgname": "a1.png", "query": "What is the share?", "label": "12%"}]
    for row in human + augmented:
        png(test / "png" / row["imgname"])
    (test / "test_human.json").write_text(json.dumps(human))
    (test / "test_augmented.json").write_text(json.dumps(augmented))
    return test


# ---- DocVQA / InfographicVQA: the RRC JSON ----------------------------------------------------------------


def docvqa_json(root: Path) -> Path:
    png(root / "documents" / "d1.png")
    rows = [
        {
            "questionId": 101,
            "question": "What is the date?",
            "question_types": ["layout"],
            "image": "documents/d1.png",
            "docId": 7,
            "answers": ["1 May 1999", "May 1, 1999"],
        },
        {
            "questionId": 102,
            "question": "Who signed?",
            "question_types": ["handwritten", "form"],
            "image": "documents/d1.png",
            "docId": 7,
            "answers": ["J. Smith"],
        },
        {
            "questionId": 103,
            "question": "What is the title?",
            "question_types": ["layout"],
            "image": "documents/d1.png",
            "docId": 7,
        },
    ]  # a test-split row: no answers
    path = root / "val_v1.0.json"
    path.write_text(json.dumps({"dataset_name": "docvqa", "dataset_split": "val", "data": rows}))
    return path


# ---- Video-MME: the annotation parquet, data/{videoID}.mp4, subtitle/{videoID}.srt ------------------------

SRT = """1
00:00:00,000 --> 00:00:00,900
<font color="white" size=".72c">the red ball rolls</font>

2
00:00:01,000 --> 00:00:01,900
<font color="white" size=".72c">then it stops</font>
"""


def videomme_set(root: Path) -> Path:
    """Two clips (one with subtitles) and three questions, as the Hugging Face annotation lays them out."""
    (root / "data").mkdir(parents=True, exist_ok=True)
    for vid, level in (("vidA", 40), ("vidB", 160)):
        frames = [np.full((32, 32, 3), level, np.uint8) for _ in range(8)]
        write_mp4(root / "data" / f"{vid}.mp4", frames, fps=4)
    (root / "subtitle").mkdir(parents=True, exist_ok=True)
    (root / "subtitle" / "vidA.srt").write_text(SRT)
    rows = [
        {
            "video_id": "001",
            "duration": "short",
            "domain": "Knowledge",
            "sub_category": "Astronomy",
            "url": "https://example.org/vidA",
            "videoID": "vidA",
            "question_id": "001-1",
            "task_type": "Counting Problem",
            "question": "How many balls?",
            "options": ["A. 1", "B. 2", "C. 3", "D. 4"],
            "answer": "A",
        },
        {
            "video_id": "001",
            "duration": "short",
            "domain": "Knowledge",
            "sub_category": "Astronomy",
            "url": "https://example.org/vidA",
            "videoID": "vidA",
            "question_id": "001-2",
            "task_type": "Action Reasoning",
            "question": "What does the ball do last?",
            "options": ["A. rolls", "B. stops", "C. jumps", "D. flies"],
            "answer": "B",
        },
        {
            "video_id": "002",
            "duration": "long",
            "domain": "Sports Competition",
            "sub_category": "Football",
            "url": "https://example.org/vidB",
            "videoID": "vidB",
            "question_id": "002-1",
            "task_type": "OCR Problems",
            "question": "What is the score?",
            "options": ["A. 0-0", "B. 1-0", "C. 2-1", "D. 3-3"],
            "answer": "D",
        },
    ]
    return write_parquet(root / "videomme" / "test-00000-of-00001.parquet", rows)
