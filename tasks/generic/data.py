"""The generic pack's loader: any image / video QA dataset in a format the field uses, read as it is stored.

    generic_load(path, split, format=None, columns=None, prompt_template="plain", turns="last", n=None,
                 streaming=False, buffer_size=1000)

The storage is opened by ``storage.open_source``, the row format detected from the columns (``formats``), the
format, storage and role -> column map printed. Rows are never all turned into samples: a sample is built
when its row is drawn (``RowSamples``), its media decoded later still, by the prompt builder. Before training
every row is checked once (placeholders against media, the answer's type, the media's stored form): the first
problem is one line naming the file, the row and the field. ``streaming=True`` (``data.streaming``) reads the
rows as a ``datasets.IterableDataset`` instead (``StreamSamples``): shuffled in a seeded buffer, each row
checked when it is drawn (a refused row is a counted skip), the position kept by the trainer's stream sampler.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from mmreason.rows import where
from mmreason.tasks.generic import media, templates
from mmreason.tasks.generic.answers import REWARD_OF_KIND, first_reference, kind_of
from mmreason.tasks.generic.formats import Format, Parts, detect, unread
from mmreason.tasks.generic.formats.common import has_reasoning, strip_answer_tag
from mmreason.tasks.generic.storage import Source, open_source
from mmreason.types import Sample

MAX_META_CHARS = 2_000  # a column value longer than this (as text) stays out of the sample's meta
# Turns of one conversation (ShareGPT ``conversations``, TRL ``messages``): each assistant turn's prefix is a
# sample under ``turns=all``, so a row of T turns costs O(T^2) (one 30,000-turn row: 41-105 s, 7.4 GB to inspect)
MAX_TURNS = 512
TURNS = ("last", "all")


@dataclass
class Reader:
    """One opened dataset's rows as samples: its format, role -> column map and prompt template."""

    source: Source
    fmt: Format
    cols: dict[str, str]
    template: str = "plain"
    asks_own: int = 0  # rows checked that carry their own answer-format instruction (a think template skipped)

    def where(self, index: int, row: Any) -> str:
        return where(self.source.label, index, row)

    def parts(self, row: dict[str, Any], index: int) -> Parts:
        turns = row.get(self.cols.get("prompt", ""))
        if isinstance(turns, list) and len(turns) > MAX_TURNS:  # counted before any turn is read
            raise ValueError(
                f"{self.where(index, row)}: field {self.cols['prompt']!r} has {len(turns):,} turns, over the cap "
                f"of {MAX_TURNS} (MAX_TURNS in tasks/generic/data.py)"
            )
        try:
            return references(self.fmt.to_parts(row, self.cols))
        except (ValueError, TypeError, AttributeError, KeyError) as err:
            raise ValueError(f"{self.where(index, row)}: {err}") from None

    def answer(self, parts: Parts, row: dict[str, Any], index: int) -> str | list[str]:
        """The reference as text (a JSON number as written back as text), or a list of references."""
        value, name = parts.answer, self.cols.get("answer", "answer")
        values = value if isinstance(value, (list, tuple)) else [value]
        odd = next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)
        if odd is not None:  # parquet NaN / inf (JSON's NaN / Infinity are refused by the reader)
            raise ValueError(f"{self.where(index, row)}: field {name!r} (the answer) is {odd!r}, not a value")
        if isinstance(value, (list, tuple)) and all(_scalar(v) for v in value):
            if any(_text(v).strip() for v in value):
                return [_text(v) for v in value]
        elif _scalar(value) and _text(value).strip():
            return _text(value)
        empty = value in (None, "") or (isinstance(value, (list, tuple)) and all(_scalar(v) for v in value))
        shown = "empty" if empty else f"a {type(value).__name__}"
        raise ValueError(f"{self.where(index, row)}: field {name!r} (the answer) is {shown}, not a string")

    def problems(self, row: dict[str, Any], index: int) -> list[str]:
        """Every problem of one row, each a line naming the file, the row and the field (nothing decoded)."""
        try:
            parts = self.parts(row, index)
            self.answer(parts, row, index)
        except ValueError as err:
            return [str(err)]
        self.asks_own += templates.row_style(self.template, parts.text, parts.system) is not None
        out = []
        mismatch = media.check_counts(parts)
        if mismatch:
            out.append(f"{self.where(index, row)}: placeholders do not match the media: {mismatch}")
        for role, values in (("images", parts.images), ("videos", parts.videos)):
            for k, value in enumerate(values):
                wrong = media.form_problem(value, role[:-1])
                if wrong:
                    field = self.cols.get(role, self.cols.get("media", role))
                    out.append(f"{self.where(index, row)}: field {field!r}[{k}]: {wrong}")
        return out

    def sample(self, row: dict[str, Any], index: int, turn: int | None = None) -> Sample:
        """Row ``index`` as a Sample (``turn``: that assistant turn of a conversation, for multi-turn SFT)."""
        parts = self.parts(row, index)
        answer = self.answer(parts, row, index)
        rid = row.get("id")
        sid = str(rid) if isinstance(rid, (str, int)) and not isinstance(rid, bool) else str(index)
        if turn is not None and parts.turns:
            history, text, reply = parts.turns[turn]
            parts = Parts(
                text=text,
                answer=reply,
                images=parts.images,
                videos=parts.videos,
                history=history,
                system=parts.system,
                target=reply,
                choices=parts.choices,
            )
            parts.images, parts.videos = _media_shown(parts, row)
            sid, answer = f"{sid}#turn{turn}", reply
        else:
            mismatch = media.check_counts(parts)
            if mismatch:
                raise ValueError(f"{self.where(index, row)}: placeholders do not match the media: {mismatch}")
        kind = kind_of(answer, signal=parts.kind, choices=parts.choices)
        text, style = templates.render_row(self.template, parts.text, parts.system)
        meta = self.meta(row)
        meta.update(
            answer_kind=kind,
            reward=REWARD_OF_KIND[kind],
            answer_format=style,
            format=self.fmt.name,
            target=parts.target or templates.target_text(style, first_reference(answer), str(row.get("process") or "")),
        )
        if parts.choices:
            meta["choices"] = list(parts.choices)
        base = self.source.base
        return Sample(
            id=sid,
            messages=media.chat(parts, text),
            answer=answer,
            images=[media.image_source(v, base) for v in parts.images],
            videos=[media.video_source(v, base) for v in parts.videos],
            meta=meta,
            task="generic",
        )

    def meta(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row's other columns (not a role's), small values only: what rewards and ``group_by`` read."""
        used = set(self.cols.values())
        return {
            k: v
            for k, v in row.items()
            if k not in used and v is not None and not isinstance(v, bytes) and len(str(v)) <= MAX_META_CHARS
        }


def references(parts: Parts) -> Parts:
    """``parts`` with its reference freed of R1-style tags: ``<answer>X</answer>`` -> X, and a whole completion
    ``<think>...</think><answer>X</answer>`` -> X, that completion becoming the SFT target (every format, so a
    TRL or EasyR1 reference written so scores a right answer 1)."""
    value = parts.answer
    if has_reasoning(value) and parts.target is None:
        parts.target = value.strip()
    if isinstance(value, (list, tuple)):
        parts.answer = [strip_answer_tag(v) for v in value]
    else:
        parts.answer = strip_answer_tag(value)
    return parts


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)


def _media_shown(parts: Parts, row: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """The media a conversation prefix shows: as many as its placeholders (all of them when it has none)."""
    n_image, n_video = media.counts(parts)
    if n_image == 0 and n_video == 0:
        return parts.images, parts.videos
    return parts.images[:n_image], parts.videos[:n_video]


class RowSamples(Sequence):
    """The samples of a random-access dataset, each built when it is read (``index``: (row, turn) pairs for
    multi-turn SFT, else row k is sample k)."""

    def __init__(self, reader: Reader, rows: Any, index: list[tuple[int, int]] | None = None, limit: int | None = None):
        self.reader, self.rows, self.index = reader, rows, index
        total = len(index) if index is not None else len(rows)
        self.size = min(total, limit) if limit else total

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self.size))]
        if not -self.size <= i < self.size:
            raise IndexError(i)
        i %= self.size
        if self.index is None:
            return self.reader.sample(self.rows[i], i)
        row, turn = self.index[i]
        return self.reader.sample(self.rows[row], row, turn)


class StreamSamples:
    """A streamed dataset as the trainer's stream sampler reads it: sample k is the k-th row of the seeded
    shuffled stream (epoch k // len), read in order; ``start(seed, position)`` (re)opens the stream there."""

    CACHE = 512  # recent rows kept (every process reads the whole stream and builds only its own share)

    def __init__(self, reader: Reader, stream: Any, num_rows: int, buffer_size: int = 1000, limit: int | None = None):
        self.reader, self.stream, self.buffer_size = reader, stream, buffer_size
        self.size = min(num_rows, limit) if limit else num_rows
        self.seed, self.next, self.rows, self.iterator = 0, 0, {}, None

    def __len__(self) -> int:
        return self.size

    def start(self, *, seed: int, position: int) -> None:
        self.seed = seed
        self._open(position)

    def _open(self, position: int) -> None:
        epoch, offset = divmod(position, self.size)
        stream = self.stream.take(self.size) if self.size < self.reader.source.num_rows else self.stream
        # each epoch its own seeded order (the seed, not datasets' set_epoch, which skip() does not carry)
        stream = stream.shuffle(seed=(self.seed * 1_000_003 + epoch) % 2**32, buffer_size=self.buffer_size)
        self.iterator: Iterator | None = iter(stream.skip(offset))
        self.next, self.rows = position, {}

    def __getitem__(self, k: int) -> Sample:
        if k not in self.rows and (self.iterator is None or k < self.next):
            self._open(k)
        while k not in self.rows:
            try:
                row = next(self.iterator)  # type: ignore[arg-type]
            except StopIteration:  # the epoch ended: the next one, reshuffled
                self._open(self.next)
                continue
            self.rows[self.next] = row
            self.rows.pop(self.next - self.CACHE, None)
            self.next += 1
        return self.reader.sample(self.rows[k], k)


def generic_load(
    path: str | None = None,
    split: str = "train",
    *,
    format: str | None = None,
    columns: dict[str, str] | None = None,
    prompt_template: str = "plain",
    turns: str = "last",
    n: int | None = None,
    streaming: bool = False,
    buffer_size: int = 1000,
) -> Sequence[Sample]:
    """The samples of the dataset at ``path`` (see the module doc)."""
    if path is None:
        raise ValueError(
            "the generic pack has no data of its own: set data.train_path (and data.eval_path), or --tasks generic:PATH"
        )
    if turns not in TURNS:
        raise ValueError(f"turns={turns!r}: not one of {', '.join(TURNS)}")
    if columns is not None and not isinstance(columns, dict):
        raise ValueError(f"columns={columns!r}: give a mapping {{role: column}}, e.g. {{prompt: question}}")
    templates.render(prompt_template, "a question")  # a bad template (or one naming an undefined variable) fails
    # before any row is read: rendered per row, it would make every row a skip
    source = open_source(str(path), split, streaming=streaming)
    fmt, cols = detect(source.columns, label=source.label, forced=format, renames=columns)
    reader = Reader(source, fmt, cols, prompt_template)
    left = unread(fmt, source.columns, columns)
    print(
        f"generic: {source.label}: format {fmt.name}{' (forced)' if format else ' (detected)'}, "
        f"{source.storage}, {source.num_rows:,} rows; columns "
        + ", ".join(f"{role}={col}" for role, col in cols.items())
        + (f"; left unread: {', '.join(repr(col) for col, _, _ in left)}" if left else ""),
        flush=True,
    )
    if streaming:
        return StreamSamples(reader, source.stream, source.num_rows, buffer_size, n)
    index = check_rows(reader, source.rows, limit=n, turns=turns)
    if reader.asks_own:
        print(
            f"generic: {source.label}: {reader.asks_own:,} rows ask for their own answer format (<think> / \\boxed / "
            f"<answer>): prompt_template {prompt_template} is not added to them (their own is kept)",
            flush=True,
        )
    return RowSamples(reader, source.rows, index, n)


def iter_rows(rows: Any, limit: int | None = None, batch_size: int = 4096) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, row) of a list or a ``datasets.Dataset`` (read in Arrow batches), the first ``limit``."""
    if isinstance(rows, list):
        yield from enumerate(rows[:limit] if limit else rows)
        return
    count = min(len(rows), limit) if limit else len(rows)
    index = 0
    for batch in rows.iter(batch_size=batch_size):
        names = list(batch)
        for values in zip(*(batch[k] for k in names)):
            if index >= count:
                return
            yield index, dict(zip(names, values))
            index += 1


def check_rows(
    reader: Reader, rows: Any, *, limit: int | None = None, turns: str = "last"
) -> list[tuple[int, int]] | None:
    """Check every row before training; ValueError with the first problem (and how many rows have one).
    With ``turns=all`` also the (row, turn) index of every assistant turn."""
    first, bad, index = None, 0, [] if turns == "all" else None
    for i, row in iter_rows(rows, limit):
        found = reader.problems(row, i)
        if found:
            bad += 1
            first = first or found[0]
        elif index is not None:
            index.extend((i, t) for t in range(max(1, len(reader.parts(row, i).turns))))
    if bad:
        more = f" ({bad:,} rows have problems; `mmreason data inspect` lists them all)" if bad > 1 else ""
        raise ValueError(f"{first}{more}")
    return index
