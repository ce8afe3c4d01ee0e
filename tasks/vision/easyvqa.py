"""easy-VQA (MIT, PyPI ``easy-vqa``): 5,000 64x64 images of one coloured shape, ~48k questions, 13 answers.

Converted on the fly from the installed package into the pack's rows: nothing is copied or committed;
image paths point into the package. Train = the package's train split (4,000 images, 38,575 questions);
eval/test = its test split (1,000 other images, 9,673 questions), so eval images are never trained on.

Each image's colour and shape are read from its own "what color ..." / "what shape ..." answers and
written into a one-sentence trace ("The image shows a teal circle."), the thought SFT imitates.
A question's ``template`` replaces colour and shape words with ``{colour}`` / ``{shape}``: the unit of
the text-only baseline (``baseline.py``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

COLOURS = ("black", "blue", "brown", "gray", "green", "red", "teal", "yellow")
SHAPES = ("circle", "rectangle", "triangle")
# sha256 of the question files of easy-vqa 1.0 (the files this converter was written against)
SHA256 = {
    "train": "bb67697636aed0e65631d4266824aebeae5c833b0f37ed781e20752e85617ec5",
    "test": "0d4630a51bafec65343e2f6af9cdd20cf8eae214344ef57636202eec409553f7",
}


def available() -> bool:
    return importlib.util.find_spec("easy_vqa") is not None


def package_dir() -> Path:
    spec = importlib.util.find_spec("easy_vqa")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            "the vision pack's easy-VQA data comes from the `easy-vqa` package: pip install easy-vqa "
            "(or use task_args source: synthetic)"
        )
    return Path(spec.origin).parent / "data"


def package_split(split: str) -> str:
    return "train" if split == "train" else "test"


def template_of(question: str) -> str:
    """The question with colour / shape words replaced: "is there a {colour} shape?"."""
    words = []
    for word in question.replace("?", " ?").split():
        words.append("{colour}" if word in COLOURS else "{shape}" if word in SHAPES else word)
    return " ".join(words).replace(" ?", "?")


def answer_type_of(answer: str) -> str:
    return "yes/no" if answer in ("yes", "no") else "free-form"


def _image_facts(questions: list[list[Any]]) -> dict[int, dict[str, str]]:
    """image id -> {"colour", "shape"} from the questions that ask for them."""
    facts: dict[int, dict[str, str]] = defaultdict(dict)
    for _text, answer, image in questions:
        if answer in COLOURS:
            facts[int(image)]["colour"] = answer
        elif answer in SHAPES:
            facts[int(image)]["shape"] = answer
    return facts


def _trace(facts: dict[str, str]) -> str:
    colour, shape = facts.get("colour"), facts.get("shape")
    if colour and shape:
        return f"The image shows a {colour} {shape}."
    if colour or shape:
        return f"The shape in the image is {colour or 'a ' + str(shape)}."
    return ""


def easyvqa_rows(split: str = "train", *, verify: bool = True) -> list[dict[str, Any]]:
    """The split as rows of the pack's data shape (domain "perception"), in the package's order."""
    data = package_dir()
    name = package_split(split)
    raw = (data / name / "questions.json").read_bytes()
    if verify and hashlib.sha256(raw).hexdigest() != SHA256[name]:
        raise ValueError(
            f"{data / name / 'questions.json'}: unexpected content (not easy-vqa 1.0); "
            "pass verify=False to use it anyway"
        )
    questions = json.loads(raw)
    facts = _image_facts(questions)
    images = data / name / "images"
    rows = []
    for k, (text, answer, image) in enumerate(questions):
        rows.append(
            {
                "id": f"easyvqa-{name}-{k}",
                "image": str(images / f"{int(image)}.png"),
                "question": text,
                "answer": answer,
                "answer_type": answer_type_of(answer),
                "domain": "perception",
                "template": template_of(text),
                "trace": _trace(facts[int(image)]),
                "kind": "easyvqa",
                "source": "easyvqa",
                "image_id": int(image),
            }
        )
    return rows
