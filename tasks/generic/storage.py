"""Where a dataset's rows come from: every storage form the field uses, opened without reading it whole.

    .jsonl / .json (a file, a folder of them, a glob)  the project's JSON reader (``mmreason.rows``): values as
        written, so an answer column that mixes "007" and 7 keeps both as written (``datasets`` / pyarrow would
        unify the column to one type). Held in memory: for millions of rows, use parquet.
    .parquet / .arrow (a file, a folder of shards, a glob)  ``datasets.load_dataset("parquet" | "arrow")``:
        memory-mapped Arrow, a row read when it is drawn.
    a ``save_to_disk`` folder (``state.json`` / ``dataset_dict.json``)  ``datasets.load_from_disk``.
    an imagefolder (a folder with ``metadata.jsonl`` / ``metadata.csv``)  ``metadata.jsonl`` by the JSON reader (values
        as written; ``datasets``' imagefolder refuses a column mixing "007" and 7), ``file_name`` becoming the
        ``image`` column; ``metadata.csv`` by ``datasets.load_dataset("imagefolder")``.

``datasets.Image`` columns are read undecoded (``{"bytes", "path"}``): an image is decoded when its row is drawn.
``streaming=True`` gives a ``datasets.IterableDataset`` instead (parquet shards read in order, nothing converted).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmreason.files import regular_file
from mmreason.rows import read_rows

JSON_SUFFIXES = (".jsonl", ".json")
ARROW_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow"}


@dataclass
class Source:
    """An opened dataset: ``rows`` (random access) or ``stream`` (an IterableDataset), its columns, and the folder
    relative media paths are resolved against."""

    label: str
    storage: str  # jsonl | parquet | arrow | save_to_disk | imagefolder
    base: Path
    columns: list[str]
    rows: Any = None  # list[dict] | datasets.Dataset
    stream: Any = None  # datasets.IterableDataset (streaming)
    num_rows: int = 0
    files: list[str] = field(default_factory=list)


def open_source(path: str, split: str = "train", *, streaming: bool = False) -> Source:
    """The dataset at ``path`` (see the module doc); FileNotFoundError / ValueError naming it otherwise."""
    label = f"generic data {path!r}"
    p = Path(path)
    if any(c in path for c in "*?["):
        files = sorted(glob.glob(path))
        if not files:
            raise FileNotFoundError(f"{label}: the glob matches no file")
        return _files(files, label, files_base(files), streaming)
    if not p.exists():
        raise FileNotFoundError(f"{label} does not exist")
    if p.is_file():
        return _files([str(p)], label, p.parent, streaming)
    if not p.is_dir():
        regular_file(p, "generic data")  # a FIFO, device or socket: one line naming it, never a hang
    if (p / "state.json").is_file() or (p / "dataset_dict.json").is_file():
        return _from_disk(p, label, split, streaming)
    if (p / "metadata.jsonl").is_file() or (p / "metadata.csv").is_file():
        return _imagefolder(p, label, streaming)
    files = sorted(str(f) for f in p.iterdir() if f.suffix in (*JSON_SUFFIXES, *ARROW_SUFFIXES) and f.is_file())
    if not files:
        raise ValueError(
            f"{label} is a folder with no .jsonl / .json / .parquet / .arrow file, no metadata.jsonl "
            "(imagefolder) and no state.json (save_to_disk)"
        )
    return _files(files, label, p, streaming)


def files_base(files: list[str]) -> Path:
    return Path(files[0]).parent


def _files(files: list[str], label: str, base: Path, streaming: bool) -> Source:
    suffixes = {Path(f).suffix for f in files}
    if suffixes <= set(JSON_SUFFIXES):
        rows = [row for f in files for row in read_rows(f, "generic")]
        if not rows:
            raise ValueError(f"{label} holds no rows")
        columns = list(dict.fromkeys(k for row in rows[:1000] for k in row))
        stream = _generator_stream(rows) if streaming else None
        return Source(
            label,
            "jsonl",
            base,
            columns,
            rows=None if streaming else rows,
            stream=stream,
            num_rows=len(rows),
            files=files,
        )
    kinds = {ARROW_SUFFIXES.get(s) for s in suffixes}
    if len(kinds) != 1 or None in kinds:
        raise ValueError(f"{label}: mixes file kinds {sorted(suffixes)}; give one of .jsonl/.json, .parquet, .arrow")
    kind = kinds.pop()
    import datasets  # heavy: only for the Arrow storages

    if streaming and kind == "parquet":
        return Source(
            label,
            kind,
            base,
            _parquet_columns(files[0]),
            stream=_parquet_stream(files),
            num_rows=_stream_rows(None, files, kind),
            files=files,
        )
    try:
        ds = datasets.load_dataset(kind, data_files=files, split="train", streaming=streaming)
    except Exception as err:  # pyarrow / datasets: not parquet, truncated, unreadable
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"{label}: cannot be read as {kind} ({type(err).__name__}: {first})") from None
    return _dataset_source(ds, label, kind, base, files, streaming)


def _dataset_source(ds: Any, label: str, kind: str, base: Path, files: list[str], streaming: bool) -> Source:
    ds = undecoded(ds)
    columns = list(ds.features) if ds.features is not None else list(next(iter(ds)))
    if streaming:
        return Source(label, kind, base, columns, stream=ds, num_rows=_stream_rows(ds, files, kind), files=files)
    if len(ds) == 0:
        raise ValueError(f"{label} holds no rows")
    return Source(label, kind, base, columns, rows=ds, num_rows=len(ds), files=files)


def _parquet_columns(path: str) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)


def _parquet_stream(files: list[str]) -> Any:
    """Parquet shards as an IterableDataset of rows, read a record batch at a time, shards in order (one shard
    per file, so the shuffle also orders the files). A generator, not ``load_dataset(streaming=True)``: that
    reader sleeps 5 s whenever an unfinished iterator is closed (datasets' ``SLEEP_TIME_ON_THREADS_SHUTDOWN``),
    which a resume or a new epoch does."""
    import datasets

    return datasets.IterableDataset.from_generator(_parquet_rows, gen_kwargs={"files": files})


def _parquet_rows(files: list[str]):
    import pyarrow.parquet as pq

    for path in files:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
            yield from batch.to_pylist()


def _stream_rows(ds: Any, files: list[str], kind: str) -> int:
    """Rows of a streamed dataset from the files' metadata (parquet footers), nothing read."""
    if kind == "parquet":
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    return sum(1 for _ in ds)


def _from_disk(p: Path, label: str, split: str, streaming: bool) -> Source:
    import datasets

    try:
        ds = datasets.load_from_disk(str(p))
    except Exception as err:  # noqa: BLE001 - pyarrow / datasets: a damaged folder (missing shard, bad state.json)
        first = (str(err).strip().splitlines() or [""])[0][:200]
        raise ValueError(f"{label}: cannot be read as a save_to_disk folder ({type(err).__name__}: {first})") from None
    if isinstance(ds, datasets.DatasetDict):
        names = [split, *(("test", "validation") if split != "train" else ()), *ds]
        ds = ds[next(n for n in names if n in ds)]
    source = _dataset_source(ds, label, "save_to_disk", p, [str(p)], False)
    if streaming:
        source.stream, source.rows = source.rows.to_iterable_dataset(), None
    return source


def _imagefolder(p: Path, label: str, streaming: bool) -> Source:
    """An imagefolder: ``metadata.jsonl`` read as written (``datasets``' imagefolder reader refuses a column that
    mixes "007" and 7), each ``file_name`` becoming the ``image`` column; ``metadata.csv`` through ``datasets``."""
    metadata = p / "metadata.jsonl"
    if not metadata.is_file():
        import datasets

        ds = datasets.load_dataset("imagefolder", data_dir=str(p), split="train")
        source = _dataset_source(ds, label, "imagefolder", p, [str(p)], False)
        if streaming:
            source.stream, source.rows = source.rows.to_iterable_dataset(), None
        return source
    rows = []
    for k, row in enumerate(read_rows(metadata, "generic")):
        name = row.pop("file_name", None)
        if not isinstance(name, str):
            raise ValueError(f"{label}: metadata.jsonl row {k}: no 'file_name' (the image's name in the folder)")
        rows.append({"image": {"bytes": None, "path": str(p / name)}, **row})
    if not rows:
        raise ValueError(f"{label}: metadata.jsonl holds no rows")
    columns = list(dict.fromkeys(k for row in rows[:1000] for k in row))
    return Source(
        label,
        "imagefolder",
        p,
        columns,
        rows=None if streaming else rows,
        stream=_generator_stream(rows) if streaming else None,
        num_rows=len(rows),
        files=[str(metadata)],
    )


def undecoded(ds: Any) -> Any:
    """``ds`` with every ``datasets.Image`` column (also in lists) read as ``{"bytes", "path"}``, not decoded."""
    if ds.features is None:
        return ds
    changed = {name: _undecoded(feature) for name, feature in ds.features.items()}
    changed = {k: v for k, v in changed.items() if v is not None}
    for name, feature in changed.items():
        ds = ds.cast_column(name, feature)
    return ds


def _undecoded(feature: Any) -> Any:
    import datasets

    if isinstance(feature, datasets.Image):
        return datasets.Image(decode=False) if feature.decode else None
    inner = getattr(feature, "feature", None)
    if isinstance(feature, (datasets.List, datasets.LargeList)) and inner is not None:
        new = _undecoded(inner)
        return type(feature)(new) if new is not None else None
    return None


def _generator_stream(rows: list[dict[str, Any]]) -> Any:
    """An IterableDataset over in-memory rows, values as written (no features: nothing is cast)."""
    import datasets

    def gen():
        yield from rows

    return datasets.IterableDataset.from_generator(gen)
