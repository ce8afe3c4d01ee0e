"""The report's two browsers, each read in one pass and bounded whatever the size of its files.

Rollouts (``completions.jsonl``): at most ``max_steps`` logged steps, spread over the run (the stride over the
logged steps doubles whenever more would be kept; the last step is always shown; ``steps`` picks others), at
most ``max_rows`` rows each, every cell's text cut; the steps left out are listed with the command that shows
them. Eval samples (``*_samples_*.jsonl``): at most ``max_steps`` pages of ``max_rows`` docs over all files
(files spread like the steps), the means over every record. A record of the wrong shape is counted in the
page's ``Malformed`` and left out.
"""

from __future__ import annotations

import html
import math
from array import array
from pathlib import Path
from typing import Any, Protocol

from mmreason.health.records import Malformed, cut, iter_records, step_of

E = html.escape
MAX_TURNS = 20  # turns of one episode shown
MAX_MEDIA = 8  # media of one record shown
MAX_NAMES = 32  # reward components / score metrics shown


class Page(Protocol):
    """What a browser writes into: the report page (``report.Page``, which imports this module)."""

    max_rows: int
    bad: Malformed

    def media(self, paths: list[str]) -> str: ...

    def pager(self, pages: list[tuple[str, str]], label: str) -> str: ...


MAX_LISTED = 50  # runs of left-out steps (or files) listed


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _fmt(v: Any) -> str:
    n = _num(v)
    return "–" if v is None else (f"{n:.3f}" if n is not None else E(cut(v, 100)))


def _shape(row: dict[str, Any]) -> str | None:
    """Why a rollout or sample record cannot be shown, or None."""
    for key in ("rewards", "scores"):
        if key in row and row[key] is not None and not isinstance(row[key], dict):
            return f"{key} is a {type(row[key]).__name__}, not an object"
    media = row.get("media")
    if media is not None and not (isinstance(media, list) and all(isinstance(m, str) for m in media)):
        return "media is not a list of paths"
    turns = row.get("turns")
    if turns is not None and not (
        isinstance(turns, list) and all(isinstance(t, dict) and isinstance(t.get("role", ""), str) for t in turns)
    ):
        return "turns is not a list of {role: text, text: ...} objects"
    for key in ("group", "sample_id", "doc_id"):
        if isinstance(row.get(key), (list, dict)):
            return f"{key} is a {type(row[key]).__name__}"
    return None


def _trim(row: dict[str, Any]) -> dict[str, Any]:
    """The fields a browser shows, each bounded (the row itself may hold megabytes)."""
    out: dict[str, Any] = {
        k: cut(row[k])
        for k in (
            "prompt",
            "answer",
            "completion",
            "response",
            "parsed_answer",
            "target",
            "error",
            "doc_id",
            "sample_id",
            "group",
        )
        if k in row and row[k] is not None
    }
    out.update({k: row.get(k) for k in ("reward", "advantage", "truncated") if k in row})
    for key in ("rewards", "scores"):
        if isinstance(row.get(key), dict):
            out[key] = {cut(k, 100): v for k, v in list(row[key].items())[:MAX_NAMES]}
    out["media"] = [cut(m, 300) for m in (row.get("media") or [])[:MAX_MEDIA]]
    if row.get("turns"):
        out["turns"] = [(cut(t.get("role", ""), 40), cut(t.get("text", ""))) for t in row["turns"][:MAX_TURNS]]
        out["more_turns"] = len(row["turns"]) - MAX_TURNS
    return out


class StepPicker:
    """Distinct steps in the order seen; keeps rows of every ``stride``-th (the stride doubles past
    ``max_steps``), of the ``wanted`` ones and of the latest."""

    def __init__(self, max_steps: int, max_rows: int, wanted: set[int]) -> None:
        self.max_steps, self.max_rows, self.wanted = max(max_steps - 1, 1), max_rows, wanted
        self.seen = array("q")  # every distinct step, in order (8 bytes each)
        self.stride = 1
        self.current: int | None = None
        self.kept: dict[int, tuple[int, list[dict]]] = {}  # step -> (its index in seen, rows)
        self.rows: dict[int, int] = {}  # step -> rows logged (kept steps only)

    def add(self, step: int, row: dict[str, Any]) -> None:
        if step != self.current:
            self._leave()
            self.current = step
            self.seen.append(step)
            self.kept.setdefault(step, (len(self.seen) - 1, []))
        self.rows[step] = self.rows.get(step, 0) + 1
        rows = self.kept[step][1]
        if len(rows) < self.max_rows:
            rows.append(_trim(row))

    def _leave(self) -> None:
        """The current step ends: drop it unless picked; thin the picks when there are too many."""
        if self.current is None:
            return
        if not self._picked(self.current):
            self.kept.pop(self.current, None), self.rows.pop(self.current, None)
        while sum(1 for s in self.kept if s not in self.wanted) > self.max_steps:
            self.stride *= 2
            for s in [s for s in self.kept if not self._picked(s)]:
                self.kept.pop(s), self.rows.pop(s, None)

    def _picked(self, step: int) -> bool:
        return step in self.wanted or self.kept[step][0] % self.stride == 0

    def shown(self) -> list[int]:
        return sorted(self.kept)


def rollout_browser(page: Page, path: Path, *, max_steps: int, steps: set[int]) -> str:
    if not path.exists():
        return "<p>no completions.jsonl (log_completions_steps: 0)</p>"
    picker = StepPicker(max_steps, page.max_rows, steps)
    for n, row in iter_records(path, page.bad):
        step = step_of(row)
        why = "step is not an integer in [0, 2**53]" if step is None else _shape(row)
        if why:
            page.bad.add(path, n, why)
        elif step is not None:
            picker.add(step, row)
    pages = [(f"step {step}", _step_html(page, picker.kept[step][1], picker.rows[step])) for step in picker.shown()]
    return page.pager(pages, "step") + _left_out(picker, path.parent)


def _step_html(page: Page, rows: list[dict], logged: int) -> str:
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        groups.setdefault((row.get("group", "None"), row.get("sample_id", "None")), []).append(row)
    parts = []
    for (group, sample_id), members in groups.items():
        first = members[0]
        names = sorted({k for m in members for k in (m.get("rewards") or {})})
        head = "".join(f"<th>{E(n)}</th>" for n in names)
        body = "".join(
            f'<tr class="completion"><td><pre>{_completion(m)}</pre></td><td>{_fmt(m.get("reward"))}</td>'
            + "".join(f"<td>{_fmt((m.get('rewards') or {}).get(n))}</td>" for n in names)
            + f'<td class="{"pos" if (_num(m.get("advantage")) or 0) > 0 else "neg"}">'
            f"{_fmt(m.get('advantage'))}</td></tr>"
            for m in members
        )
        parts.append(
            f'<div class="group rollout"><div>{page.media(first["media"])}</div>'
            f"<p><b>{E(sample_id)}</b> (group {E(group)}) — {E(first.get('prompt', ''))}"
            f" — gold: <b>{E(first.get('answer', 'None'))}</b></p><table><tr><th>completion</th>"
            f"<th>reward</th>{head}<th>advantage</th></tr>{body}</table></div>"
        )
    more = logged - len(rows)
    note = f"<p>{more} more rows at this step not shown (max_rows)</p>" if more > 0 else ""
    return "".join(parts) + note


def _completion(m: dict) -> str:
    if m.get("turns"):
        more = f"<i>({m['more_turns']} more turns)</i>" if m["more_turns"] > 0 else ""
        return "".join(f"<b>{E(role)}:</b> {E(text)}\n" for role, text in m["turns"]) + more
    cut_note = " <i>(truncated)</i>" if m.get("truncated") else ""
    return E(m.get("completion", "")) + cut_note


def _runs(values: list[int]) -> list[str]:
    """Sorted ints as arithmetic runs: [1, 2, 3, 10, 20, 30, 35] -> ['1–3', '10–30 every 10', '35']."""
    out, i = [], 0
    while i < len(values):
        j = i + 1
        step = values[j] - values[i] if j < len(values) else 0
        while j + 1 < len(values) and values[j + 1] - values[j] == step:
            j += 1
        if j - i >= 2:
            out.append(f"{values[i]}–{values[j]}" + (f" every {step}" if step > 1 else ""))
            i = j + 1
        else:
            out.append(str(values[i]))
            i += 1
    return out


def _left_out(picker: StepPicker, run_dir: Path) -> str:
    shown = set(picker.kept)
    rest = sorted(set(picker.seen) - shown)
    if not rest:
        return ""
    runs = _runs(rest)
    listed = ", ".join(runs[:MAX_LISTED]) + (
        f", … ({len(runs) - MAX_LISTED} more runs)" if len(runs) > MAX_LISTED else ""
    )
    return (
        f'<p class="left-out">{len(rest)} more logged steps not shown (--max-steps): {E(listed)}. Show some '
        f"with <code>mmreason report {E(str(run_dir))} --steps {rest[0]},{rest[-1]}</code></p>"
    )


def samples_browser(page: Page, files: list[Path], *, max_steps: int) -> str:
    """Docs of the samples files, ``max_rows`` a page, at most ``max_steps`` pages; means over all records."""
    chosen = files
    if len(files) > max_steps:  # spread over the files, the first and the last included
        chosen = [files[round(i * (len(files) - 1) / max(max_steps - 1, 1))] for i in range(max_steps)]
    per_file = max(max_steps // max(len(chosen), 1), 1)
    pages = []
    for path in chosen:
        pages += _samples_pages(page, path, per_file)
    picked = set(chosen)
    rest = [f.name for f in files if f not in picked]
    note = (
        (
            f'<p class="left-out">{len(rest)} more samples files not shown (--max-steps): '
            f"{E(', '.join(rest[:MAX_LISTED]))}{' …' if len(rest) > MAX_LISTED else ''}</p>"
        )
        if rest
        else ""
    )
    return page.pager(pages, "samples file") + note


def _samples_pages(page: Page, path: Path, n_pages: int) -> list[tuple[str, str]]:
    kept: list[dict] = []
    sums: dict[str, list[float]] = {}  # metric -> [sum, count]
    total = 0
    for n, r in iter_records(path, page.bad):
        why = _shape(r)
        if why:
            page.bad.add(path, n, why)
            continue
        total += 1
        if len(kept) < n_pages * page.max_rows:
            kept.append(_trim({**r, "prompt": _question(r["prompt"]) if isinstance(r.get("prompt"), str) else ""}))
        for m, v in (r.get("scores") or {}).items():
            if _num(v) is not None and (m in sums or len(sums) < MAX_NAMES):
                acc = sums.setdefault(m, [0.0, 0])
                acc[0], acc[1] = acc[0] + v, acc[1] + 1
    metrics = sorted(sums)
    means = ", ".join(f"{E(m)} {sums[m][0] / sums[m][1]:.3f}" for m in metrics)
    head = "".join(f"<th>{E(m)}</th>" for m in metrics)
    pages = []
    for start in range(0, max(len(kept), 1), page.max_rows):
        chunk = kept[start : start + page.max_rows]
        rows = "".join(
            f'<tr class="sample"><td>{E(r.get("doc_id", "None"))}</td><td>{page.media(r["media"])}</td>'
            f"<td><pre>{E(r.get('prompt', ''))}</pre></td><td><pre>{E(r.get('response', ''))}"
            f"</pre></td><td>{E(r.get('parsed_answer', ''))}</td><td>{E(r.get('target', 'None'))}</td>"
            + "".join(f"<td>{_fmt((r.get('scores') or {}).get(m))}</td>" for m in metrics)
            + f"<td>{E(r.get('error', ''))}</td></tr>"
            for r in chunk
        )
        title = f"{path.name} ({means})" + (f" rows {start + 1}–{start + len(chunk)}" if total > page.max_rows else "")
        pages.append(
            (
                title,
                f"<table><tr><th>doc</th><th>media</th><th>question</th><th>response</th><th>parsed"
                f"</th><th>target</th>{head}<th>error</th></tr>{rows}</table>",
            )
        )
    if total > len(kept):
        pages[-1] = (
            pages[-1][0],
            pages[-1][1] + f"<p>{total - len(kept)} more docs in {E(path.name)} not shown "
            "(--max-steps pages of --max-rows)</p>",
        )
    return pages


def _question(prompt: str) -> str:
    """The last user turn of a rendered chat, without template markers (the text otherwise)."""
    if "<|im_start|>user" in prompt:
        prompt = prompt.rsplit("<|im_start|>user", 1)[1].split("<|im_end|>")[0]
    for marker in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"):
        prompt = prompt.replace(marker, "")
    return prompt.strip()
