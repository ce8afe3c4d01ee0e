"""ChartQA's files as published (Masry et al., "ChartQA", Findings of ACL 2022).

- the repository layout: ``test/test_human.json`` and ``test/test_augmented.json`` (lists of
  ``{"imgname": "x.png", "query": str, "label": str}``), images in ``test/png/``. PATH is one of the two files
  (its split from its name) or the folder holding them (both splits);
- the Hugging Face parquet: ``{"image": {"bytes", "path"}, "query": str, "label": str | [str]}``, the split from
  ``human_or_machine`` (0 human, 1 augmented) when the file has it, or lmms-lab's ``{"type": "human_test" |
  "augmented_test", "question", "answer", "image"}``.

ChartQA rows have no id: a doc's id is ``{split}_{row index in its file}`` (``human_0``, ``augmented_12``).
Prompt (lmms-eval's ``chartqa``): ``{query}\\nAnswer the question with a single word.`` ``chartqa_row`` turns one
row into a ``Sample``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mmreason.published_files import Loaded, image_field, row_where, table_rows, text_field
from mmreason.types import Sample

INSTRUCTION = "Answer the question with a single word."
SPLIT_FILES = {"human": "test_human.json", "augmented": "test_augmented.json"}


def split_of(row: dict[str, Any], source: str) -> str:
    if row.get("type") in ("human_test", "augmented_test"):
        return str(row["type"]).removesuffix("_test")
    if row.get("human_or_machine") in (0, 1):
        return "human" if row["human_or_machine"] == 0 else "augmented"
    name = Path(source).name
    return next((split for split in SPLIT_FILES if split in name), "test")


def chartqa_row(row: dict[str, Any], index: int, source: str, image_dir: str | Path | None = None) -> Sample:
    """One published row -> Sample; ValueError naming the file, row and field otherwise."""
    split = split_of(row, source)
    rid = f"{split}_{index}"
    where = row_where(source, index, rid)
    query = text_field(row, "query" if "query" in row else "question", where)
    label = row.get("label", row.get("answer"))
    labels = (
        [str(v) for v in label] if isinstance(label, (list, tuple)) else [text_field({"label": label}, "label", where)]
    )
    if not labels:
        raise ValueError(f"{where}: 'label' is an empty list")
    if "imgname" in row:
        folder = Path(image_dir) if image_dir else Path(source).parent / "png"
        image = image_field(text_field(row, "imgname", where), folder, where, "imgname")
    else:
        image = image_field(row.get("image"), Path(image_dir or Path(source).parent), where, "image")
    if image is None:
        raise ValueError(f"{where}: no image ('imgname' or 'image')")
    content = [{"type": "image"}, {"type": "text", "text": f"{query}\n{INSTRUCTION}"}]
    return Sample(
        id=rid,
        messages=[{"role": "user", "content": content}],
        answer=labels if len(labels) > 1 else labels[0],
        images=[image],
        meta={"split": split, "question": query},
        task="chartqa",
    )


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    for folder in (path, path / "test", path / "ChartQA Dataset" / "test"):
        found = [folder / name for name in SPLIT_FILES.values() if (folder / name).is_file()]
        if found:
            return found
    return [path]  # a folder of parquet files


def chartqa_load(path: str | None, split: str = "eval", *, image_dir: str | None = None, **_: Any) -> Loaded:
    """The rows of ``path`` (see the module doc) as samples, human split first."""
    if path is None:
        raise ValueError(
            "chartqa reads the benchmark's own files: --tasks chartqa:PATH (test/, "
            "test_human.json or a parquet file); it has no built-in data"
        )
    loaded = Loaded(
        extraction="the response's <answer> or \\boxed{} body when it has one, else the whole "
        "response (ChartQA compares the response as it is)"
    )
    for file in _files(Path(path)):
        rows = table_rows(file, "chartqa")
        per_file: dict[str, int] = {}
        for row, source in rows:
            split = split_of(row, source)
            index = per_file.get(split, 0)
            per_file[split] = index + 1
            loaded.append(chartqa_row(row, index, source, image_dir))
    return loaded
