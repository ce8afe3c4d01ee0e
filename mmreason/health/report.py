"""`mmreason report`: a run or eval directory as one self-contained HTML file (no server, no network).

A training run (``metrics.jsonl``): curves (reward and its components, held-out metrics, entropy, KL, the
step-time split, truncation, zero-spread groups), the alarm timeline (the logged ``alarm/<name>`` metrics;
for a run logged without them the alarms are replayed over its rows with the default thresholds), the
``alarm`` and ``unseen_media`` events, and a rollout browser: per logged step (``completions.jsonl``) each
prompt's media thumbnails beside its completions, reward components, advantages and (multi-turn) turns;
then its in-training eval samples. An eval directory (``*_samples_*.jsonl``): question, media, response,
parsed answer, target and scores per doc. Two directories: their curves overlaid, then each report.

Bounded whatever the run's length (docs/health.md has the figures): every file is read once, row by row;
curves keep the lowest and highest point of each of a fixed number of step buckets, alarm marks are merged
ranges, a browser shows at most ``max_steps`` steps (pages) of ``max_rows`` rows with each cell's text cut,
at most ``MAX_THUMBS`` thumbnails, inlined only from inside the report's directories. Records of the wrong
shape are counted by reason and listed at the top of the page.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from mmreason.health.browsers import rollout_browser, samples_browser
from mmreason.health.records import Malformed, cut, iter_records
from mmreason.health.runlog import RunLog, read_run_log
from mmreason.health.svg import alarm_timeline, line_chart
from mmreason.health.thumbs import Thumbs

E = html.escape
MAX_STEPS = 20  # logged steps (pages) a browser shows
MAX_EVENTS = 1000  # alarm / unseen_media events read from events.log
STYLE = """body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:24px}
.charts{display:flex;flex-wrap:wrap;gap:8px}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:3px 5px;vertical-align:top;text-align:left}pre{white-space:pre-wrap;margin:0;
max-width:520px}.thumb{max-width:128px;max-height:128px;border:1px solid #ccc;margin:1px}.pos{color:#2ca02c}
.neg{color:#d62728}.alarm{color:#d62728}.group{margin:10px 0;padding:6px;border:1px solid #eee}
.page{display:none}.page.shown{display:block}.missing{color:#999;font-size:11px}"""
SCRIPT = """const T=JSON.parse(document.getElementById('thumbs').textContent);
document.querySelectorAll('img[data-t]').forEach(i=>{i.onload=()=>{i.dataset.shown=i.naturalWidth};
i.src=T[i.dataset.t]});
document.querySelectorAll('select.pager').forEach(s=>{const f=()=>{document.querySelectorAll(
'.page[data-pager="'+s.id+'"]').forEach(p=>p.classList.toggle('shown',p.dataset.page===s.value))};
s.addEventListener('change',f);f()});"""


class Page:
    """One HTML report being written; ``pager`` ids are unique within it; ``bad`` counts malformed records."""

    def __init__(self, max_rows: int, roots: list[Path], *, allow_outside_media: bool = False) -> None:
        self.max_rows = max_rows
        self.thumbs = Thumbs(roots, allow_outside=allow_outside_media)
        self.pagers = 0
        self.bad = Malformed()

    def media(self, paths: list[str]) -> str:
        out = []
        for p in paths or []:
            ids = self.thumbs.ref(p)
            out += [f'<img class="thumb" data-t="{i}" alt="{E(p)}" title="{E(p)}">' for i in ids]
            if not ids:
                out.append(f'<div class="missing">{E(p)}: {E(self.thumbs.missing.get(p, ""))}</div>')
        return "".join(out)

    def pager(self, pages: list[tuple[str, str]], label: str) -> str:
        """A select that shows one of ``pages`` ((title, html)) at a time."""
        if not pages:
            return "<p>(none)</p>"
        self.pagers += 1
        pid = f"pager{self.pagers}"
        opts = "".join(f'<option value="{i}">{E(t)}</option>' for i, (t, _) in enumerate(pages))
        divs = "".join(
            f'<div class="page" data-pager="{pid}" data-page="{i}">{h}</div>' for i, (_, h) in enumerate(pages)
        )
        return f'<label>{E(label)} <select class="pager" id="{pid}">{opts}</select></label>{divs}'

    def malformed(self) -> str:
        if not self.bad.counts:
            return ""
        rows = "".join(
            f"<tr><td>{E(name)}</td><td>{E(why)}</td><td>{count}</td><td>{line}</td></tr>"
            for (name, why), (count, line) in sorted(self.bad.counts.items())
        )
        return (
            f'<h2 class="malformed">Malformed records left out ({self.bad.total()})</h2><table><tr><th>file'
            f"</th><th>why</th><th>records</th><th>first line</th></tr>{rows}</table>"
        )

    def document(self, title: str, body: str) -> str:
        thumbs = json.dumps(self.thumbs.uris).replace("</", "<\\/")
        return (
            f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{E(title)}</title><style>{STYLE}'
            f'</style></head><body>{self.malformed()}{body}<script type="application/json" id="thumbs">'
            f"{thumbs}</script><script>{SCRIPT}</script></body></html>"
        )


def events(page: Page, run_dir: Path) -> dict[str, tuple[list[dict[str, Any]], int]]:
    """For the ``alarm`` and ``unseen_media`` events of events.log: the first ``MAX_EVENTS``, and how many."""
    path = run_dir / "events.log"
    out: dict[str, tuple[list[dict[str, Any]], int]] = {"alarm": ([], 0), "unseen_media": ([], 0)}
    if path.exists():
        for _, e in iter_records(path, page.bad):
            kind = e.get("event")
            if kind in out:
                kept, total = out[kind]
                out[kind] = (kept + [e] if len(kept) < MAX_EVENTS else kept, total + 1)
    return out


def alarms_html(log: RunLog, alarm_events: list[dict[str, Any]]) -> str:
    reasons = dict(log.reasons)
    for e in alarm_events:
        reasons.setdefault(cut(e.get("alarm"), 100), cut(e.get("reason")))
    raised = []
    for name, held in log.alarms.items():
        if held.held:
            (a, _), (_, b) = held.ranges[0], held.ranges[-1]
            merged = f", ranges merged across gaps of up to {held.gap} steps" if held.gap > 1 else ""
            raised.append(
                f'<li class="alarm"><b>{E(cut(name, 100))}</b> (steps {a:.0f}–{b:.0f}, {held.held} steps in '
                f"{len(held.ranges)} ranges{merged}): {E(cut(reasons.get(name, '')))}</li>"
            )
    quiet = [cut(n, 100) for n, held in log.alarms.items() if not held.held]
    replayed = " (replayed with the default thresholds: the run logged no alarm metrics)" if log.replayed else ""
    return (
        f"<h2>Alarms{replayed}</h2>{alarm_timeline(log.first, log.last, log.alarms, reasons)}"
        f"<ul>{''.join(raised) or '<li>no alarm was raised</li>'}</ul><p>quiet: {E(', '.join(quiet)) or '-'}</p>"
    )


def run_section(page: Page, run_dir: Path, log: RunLog, *, max_steps: int, steps: set[int]) -> str:
    logged = events(page, run_dir)
    out = [alarms_html(log, logged["alarm"][0])]
    unseen, n_unseen = logged["unseen_media"]
    if unseen:
        out.append(
            f"<h2>Unseen media ({n_unseen})</h2><table><tr><th>sample</th><th>problems</th><th>paths"
            "</th></tr>"
            + "".join(
                f"<tr><td>{E(cut(u.get('sample_id')))}</td><td>{E(cut(u.get('problems')))}"
                f"</td><td>{E(cut(u.get('paths')))}</td></tr>"
                for u in unseen[: page.max_rows]
            )
            + "</table>"
        )
    charts = "".join(line_chart(t, s) for t, s in log.charts())
    more = f"<p>{log.series_left_out} more metric series not drawn</p>" if log.series_left_out else ""
    out.append(f'<h2>Curves ({log.rows} rows)</h2><div class="charts">{charts}</div>{more}')
    out.append(
        "<h2>Rollouts</h2>" + rollout_browser(page, run_dir / "completions.jsonl", max_steps=max_steps, steps=steps)
    )
    files = sorted((run_dir / "eval").glob("*_samples_*.jsonl"), key=_step_order) if (run_dir / "eval").is_dir() else []
    if files:
        out.append("<h2>In-training eval samples</h2>" + samples_browser(page, files, max_steps=max_steps))
    return "".join(out)


def _step_order(path: Path) -> tuple[int, str]:
    head = path.name.split("_samples_")[0]
    digits = head.removeprefix("step-")
    return (int(digits) if digits.isdigit() else 0, path.name)


def kind_of(path: Path) -> str:
    if (path / "metrics.jsonl").exists():
        return "run"
    if path.is_file() and path.name.endswith(".jsonl") or any(path.rglob("*_samples_*.jsonl")):
        return "eval"
    raise FileNotFoundError(
        f"{str(path)!r} is neither a run directory (metrics.jsonl) nor an eval directory or "
        "samples file (*_samples_*.jsonl)"
    )


def build_report(
    paths: list[str | Path],
    max_rows: int = 50,
    *,
    max_steps: int = MAX_STEPS,
    steps: set[int] | None = None,
    allow_outside_media: bool = False,
) -> str:
    """The HTML of one directory's report, or of two compared."""
    dirs = [Path(p) for p in paths]
    if not 1 <= len(dirs) <= 2:
        raise ValueError(f"mmreason report takes one or two directories, not {len(dirs)}")
    kinds = [kind_of(d) for d in dirs]
    page = Page(max_rows, [d if d.is_dir() else d.parent for d in dirs], allow_outside_media=allow_outside_media)
    logs = [read_run_log(d / "metrics.jsonl", page.bad) if k == "run" else None for d, k in zip(dirs, kinds)]
    body = []
    if len(dirs) == 2 and kinds == ["run", "run"]:
        both = [log.charts(f"{tag}: ") for tag, log in zip("AB", logs) if log is not None]
        charts = "".join(line_chart(t, {**a, **b}) for (t, a), (_, b) in zip(*both))
        body.append(
            f"<h1>A: {E(str(dirs[0]))} vs B: {E(str(dirs[1]))}</h1><h2>Curves, A and B</h2>"
            f'<div class="charts">{charts}</div>'
        )
    for tag, d, log in zip("AB" if len(dirs) == 2 else " ", dirs, logs):
        title = f"{tag.strip() + ': ' if tag.strip() else ''}{d}"
        if log is not None:  # a run directory's log (kind "run")
            body.append(
                f"<h1>Run {E(title)}</h1>" + run_section(page, d, log, max_steps=max_steps, steps=steps or set())
            )
        else:
            files = [d] if d.is_file() else sorted(d.rglob("*_samples_*.jsonl"), key=_step_order)
            body.append(f"<h1>Eval {E(title)}</h1>" + samples_browser(page, files, max_steps=max_steps))
    return page.document(" vs ".join(map(str, dirs)), "".join(body))


def write_report(
    paths: list[str | Path],
    out: str | Path | None = None,
    max_rows: int = 50,
    *,
    max_steps: int = MAX_STEPS,
    steps: set[int] | None = None,
    allow_outside_media: bool = False,
) -> Path:
    """Write the report (default ``<first dir>/report.html``, ``compare.html`` for two) and return its path."""
    first = Path(paths[0])
    target = (
        Path(out)
        if out
        else (first if first.is_dir() else first.parent) / ("compare.html" if len(paths) == 2 else "report.html")
    )
    html_text = build_report(paths, max_rows, max_steps=max_steps, steps=steps, allow_outside_media=allow_outside_media)
    target.write_text(html_text, encoding="utf-8", errors="replace")
    return target
