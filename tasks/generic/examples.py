"""The generic pack's example layouts (``mmreason data examples``), one file each under ``--out``, as the tools
publish them; the pictures under ``media/`` (paths relative to the data file), Video-R1's clips too:

    easyr1      easyr1.parquet, easyr1_test.parquet: problem with <image>, answer, images [{"bytes", "path"}],
                category (the shape: an eval's group_by column)
    trl         trl.jsonl: prompt messages with an {"type": "image"} part, image (a path), solution
    verl        verl.parquet: data_source, prompt [{"role", "content" with <image>}], images [{"bytes", "path"}],
                ability, reward_model {"style", "ground_truth"}, extra_info
    videor1     videor1.json: problem_type, problem, options, solution <answer>..</answer>, path, data_type
                (multiple-choice colour questions on clips, numerical count questions on pictures)
    sharegpt    sharegpt.json: id, image, conversations (two human / gpt turns)
    columns     mine.jsonl: question, label, img (other column names: read with data.task_args.columns)

Each answer is drawn in its picture (``mmreason.examples.Scene``): the shapes' colour or their count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmreason.examples import Scene, colour_options, png, write_clip, write_json, write_parquet, write_png
from mmreason.paths import write_jsonl

COLOUR_Q = "What colour are the shapes? Answer with one word."
COUNT_Q = "How many shapes are there? Answer with a number."
VIDEO_Q = "What colour is the moving shape?"


def question(scene: Scene, k: int) -> tuple[str, str]:
    """Row ``k``'s question and answer: the colour on even rows, the count on odd ones."""
    return (COLOUR_Q, scene.colour) if k % 2 == 0 else (COUNT_Q, str(scene.count))


def _picture(out: Path, scene: Scene) -> str:
    return write_png(out / "media", scene).relative_to(out).as_posix()


def _easyr1_rows(drawn: list[Scene]) -> list[dict[str, Any]]:
    rows = []
    for k, scene in enumerate(drawn):
        text, answer = question(scene, k)
        image = {"bytes": png(scene), "path": f"{scene.name}.png"}
        rows.append({"problem": f"<image>{text}", "answer": answer, "images": [image], "category": scene.shape})
    return rows


def easyr1(out: Path, drawn: list[Scene]) -> Path:
    held_out = [Scene(s.colour, s.shape, s.count % 3 + 1) for s in reversed(drawn)]  # other counts, other order
    write_parquet(out / "easyr1_test.parquet", _easyr1_rows(held_out))
    return write_parquet(out / "easyr1.parquet", _easyr1_rows(drawn))


def trl(out: Path, drawn: list[Scene]) -> Path:
    rows = []
    for k, scene in enumerate(drawn):
        text, answer = question(scene, k)
        prompt = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
        rows.append({"prompt": prompt, "image": _picture(out, scene), "solution": answer})
    return write_jsonl(out / "trl.jsonl", rows)


def verl(out: Path, drawn: list[Scene]) -> Path:
    rows = []
    for k, scene in enumerate(drawn):
        text, answer = question(scene, k)
        rows.append(
            {
                "data_source": "examples",
                "prompt": [{"role": "user", "content": f"<image>{text}"}],
                "images": [{"bytes": png(scene), "path": f"{scene.name}.png"}],
                "ability": "colour" if k % 2 == 0 else "count",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": "train", "index": k},
            }
        )
    return write_parquet(out / "verl.parquet", rows)


def videor1(out: Path, drawn: list[Scene]) -> Path:
    rows = []
    for k, scene in enumerate(drawn):
        row = {"problem_id": k + 1, "data_source": "examples"}
        if k % 2 == 0:
            clip = write_clip(out / "media" / f"{scene.name}.mp4", scene)
            options = [f"{letter}. {colour}" for letter, colour in zip("ABCD", colour_options())]
            row |= {"problem": VIDEO_Q, "data_type": "video", "problem_type": "multiple choice", "options": options}
            row |= {"solution": f"<answer>{scene.letter}</answer>", "path": clip.relative_to(out).as_posix()}
        else:
            row |= {"problem": COUNT_Q, "data_type": "image", "problem_type": "numerical", "options": []}
            row |= {"solution": f"<answer>{scene.count}</answer>", "path": _picture(out, scene)}
        rows.append(row)
    return write_json(out / "videor1.json", rows)


def sharegpt(out: Path, drawn: list[Scene]) -> Path:
    rows = []
    for k, scene in enumerate(drawn):
        turns = [
            ("human", f"<image>\n{COLOUR_Q}"),
            ("gpt", scene.colour),
            ("human", COUNT_Q),
            ("gpt", str(scene.count)),
        ]
        conversations = [{"from": who, "value": value} for who, value in turns]
        rows.append({"id": f"example_{k}", "image": _picture(out, scene), "conversations": conversations})
    return write_json(out / "sharegpt.json", rows)


def columns(out: Path, drawn: list[Scene]) -> Path:
    rows = []
    for k, scene in enumerate(drawn):
        text, answer = question(scene, k)
        rows.append({"question": f"<image>{text}", "label": answer, "img": [_picture(out, scene)]})
    return write_jsonl(out / "mine.jsonl", rows)


LAYOUTS = {"easyr1": easyr1, "trl": trl, "verl": verl, "videor1": videor1, "sharegpt": sharegpt, "columns": columns}
