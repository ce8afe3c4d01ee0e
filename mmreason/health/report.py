"""`mmreason report`: a run or eval directory as one self-contained HTML file (no server, no network).

A training run (``metrics.jsonl``): curves (reward and its components, held-out metrics, entropy, KL, the
step-time split, truncation, zero-spread groups), the alarm timeline (the logged ``alarm/<name>`` metrics;
for a run logged without them the alarms are replayed over its rows with the default thresholds), the
``alarm`` and ``unseen_media`` events, and a rollout browser: per logged step (``completions.jsonl``) each
prompt's media thumbnails beside its completions, reward components, advantages and (multi-turn) turns;
then its in-training eval samples. An eval directory (``*_samples_*.jsonl``): question, media, response,
parsed answer, target and scores per doc. Two directories: their curves overlaid, then each report.
Thumbnails are downscaled PNGs inlined once each; a page of a browser shows at most ``max_rows`` rows.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from mmreason.health.svg import alarm_timeline, line_chart
from mmreason.health.thumbs import Thumbs

E = html.escape
CURVES = (  # (title, metric-key predicate)
    ("training reward", lambda k: k == "reward/mean" or (k.startswith("rewards/") and k.endswith("/mean"))),
    ("held-out (in-training eval)", lambda k: k.startswith("eval/") and not k.endswith("/n_failed")),
    ("entropy", lambda k: k == "entropy"),
    ("KL", lambda k: k == "kl"),
    ("step time split (s)", lambda k: k.startswith("time/") and k not in ("time/video_decode",)),
    ("truncated / zero-spread groups", lambda k: k in ("completion/clipped_ratio", "frac_reward_zero_std",
                                                       "episodes/cut_share")),
    ("answers", lambda k: k in ("answers/top_share", "answers/gold_top_share")),
)
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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}: line {n} is not JSON: {exc}") from None
    return rows


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


class Page:
    """One HTML report being written; ``pager`` ids are unique within it."""

    def __init__(self, max_rows: int, roots: list[Path]):
        self.max_rows = max_rows
        self.thumbs = Thumbs(roots)
        self.pagers = 0

    def media(self, paths: list[str]) -> str:
        out = []
        for p in paths or []:
            ids = self.thumbs.ref(str(p))
            out += [f'<img class="thumb" data-t="{i}" alt="{E(str(p))}" title="{E(str(p))}">' for i in ids]
            if not ids:
                out.append(f'<div class="missing">{E(str(p))}: {E(self.thumbs.missing.get(str(p), ""))}</div>')
        return "".join(out)

    def pager(self, pages: list[tuple[str, str]], label: str) -> str:
        """A select that shows one of ``pages`` ((title, html)) at a time."""
        if not pages:
            return "<p>(none)</p>"
        self.pagers += 1
        pid = f"pager{self.pagers}"
        opts = "".join(f'<option value="{i}">{E(t)}</option>' for i, (t, _) in enumerate(pages))
        divs = "".join(f'<div class="page" data-pager="{pid}" data-page="{i}">{h}</div>'
                       for i, (_, h) in enumerate(pages))
        return f'<label>{E(label)} <select class="pager" id="{pid}">{opts}</select></label>{divs}'

    def document(self, title: str, body: str) -> str:
        thumbs = json.dumps(self.thumbs.uris).replace("</", "<\\/")
        return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>{E(title)}</title><style>{STYLE}'
                f'</style></head><body>{body}<script type="application/json" id="thumbs">{thumbs}</script>'
                f"<script>{SCRIPT}</script></body></html>")


def curves(rows: list[dict[str, Any]], prefix: str = "") -> list[tuple[str, dict[str, list[tuple[float, float]]]]]:
    keys = sorted({k for r in rows for k in r})
    out = []
    for title, wanted in CURVES:
        series = {}
        for k in (k for k in keys if wanted(k)):
            pts = [(float(r["step"]), _num(r.get(k))) for r in rows if "step" in r]
            series[prefix + k] = [(x, y) for x, y in pts if y is not None]
        out.append((title, series))
    return out


def alarm_steps(run_dir: Path, rows: list[dict[str, Any]]) -> tuple[dict[str, list[int]], dict[str, str]]:
    """alarm -> steps it held, and alarm -> its first reason. From ``alarm/<name>`` and ``events.log``,
    or replayed with the default thresholds for a run logged without them."""
    on: dict[str, list[int]] = {}
    reasons: dict[str, str] = {}
    if not any(k.startswith("alarm/") for r in rows for k in r):
        from mmreason.health.config import HealthConfig
        from mmreason.health.monitor import HealthMonitor

        monitor = HealthMonitor(HealthConfig(), lambda *a, **k: None, say=lambda _: None)
        rows = [{**r, **monitor.check(r["step"], {k: v for k, v in r.items() if k != "step"})} for r in rows]
        reasons.update({name: reason for _, name, reason in reversed(monitor.raised)})
    for r in rows:
        for k, v in r.items():
            if k.startswith("alarm/"):
                on.setdefault(k[len("alarm/"):], [])
                if v:
                    on[k[len("alarm/"):]].append(r["step"])
    for e in events(run_dir, "alarm"):
        reasons.setdefault(str(e.get("alarm")), str(e.get("reason")))
    return on, reasons


def events(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    path = run_dir / "events.log"
    if not path.exists():
        return []
    return [e for e in read_jsonl(path) if e.get("event") == kind]


def run_section(page: Page, run_dir: Path) -> str:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    charts = "".join(line_chart(t, s) for t, s in curves(rows))
    on, reasons = alarm_steps(run_dir, rows)
    raised = [f'<li class="alarm"><b>{E(n)}</b> (steps {s[0]}–{s[-1]}, {len(s)} steps): {E(reasons.get(n, ""))}</li>'
              for n, s in on.items() if s]
    quiet = [n for n, s in on.items() if not s]
    unseen = events(run_dir, "unseen_media")
    out = [f"<h2>Alarms</h2>{alarm_timeline([r['step'] for r in rows], on, reasons)}",
           f"<ul>{''.join(raised) or '<li>no alarm was raised</li>'}</ul>",
           f"<p>quiet: {E(', '.join(quiet)) or '-'}</p>"]
    if unseen:
        out.append(f"<h2>Unseen media ({len(unseen)})</h2><table><tr><th>sample</th><th>problems</th><th>paths"
                   "</th></tr>" + "".join(f"<tr><td>{E(str(u.get('sample_id')))}</td><td>{E('; '.join(u.get('problems', [])))}"
                                          f"</td><td>{E(', '.join(map(str, u.get('paths', []))))}</td></tr>"
                                          for u in unseen[: page.max_rows]) + "</table>")
    out.append(f'<h2>Curves</h2><div class="charts">{charts}</div>')
    out.append("<h2>Rollouts</h2>" + rollout_browser(page, run_dir / "completions.jsonl"))
    files = sorted((run_dir / "eval").glob("*_samples_*.jsonl"), key=_step_order) if (run_dir / "eval").is_dir() else []
    if files:
        out.append("<h2>In-training eval samples</h2>" + samples_browser(page, files))
    return "".join(out)


def _step_order(path: Path) -> tuple[int, str]:
    head = path.name.split("_samples_")[0]
    digits = head.removeprefix("step-")
    return (int(digits) if digits.isdigit() else 0, path.name)


def _fmt(v: Any) -> str:
    n = _num(v)
    return "–" if v is None else (f"{n:.3f}" if n is not None else E(str(v)))


def rollout_browser(page: Page, path: Path) -> str:
    if not path.exists():
        return "<p>no completions.jsonl (log_completions_steps: 0)</p>"
    by_step: dict[int, list[dict]] = {}
    for row in read_jsonl(path):
        by_step.setdefault(int(row.get("step", 0)), []).append(row)
    pages = []
    for step, rows in sorted(by_step.items()):
        groups: dict[Any, list[dict]] = {}
        for row in rows[: page.max_rows]:
            groups.setdefault((row.get("group"), row.get("sample_id")), []).append(row)
        parts = []
        for (group, sample_id), members in groups.items():
            first = members[0]
            names = sorted({k for m in members for k in (m.get("rewards") or {})})
            head = "".join(f"<th>{E(n)}</th>" for n in names)
            body = "".join(
                f"<tr class=\"completion\"><td><pre>{_completion(m)}</pre></td><td>{_fmt(m.get('reward'))}</td>"
                + "".join(f"<td>{_fmt((m.get('rewards') or {}).get(n))}</td>" for n in names)
                + f"<td class=\"{'pos' if (_num(m.get('advantage')) or 0) > 0 else 'neg'}\">"
                  f"{_fmt(m.get('advantage'))}</td></tr>" for m in members)
            parts.append(f'<div class="group rollout"><div>{page.media(first.get("media", []))}</div>'
                         f"<p><b>{E(str(sample_id))}</b> (group {E(str(group))}) — {E(str(first.get('prompt', '')))}"
                         f" — gold: <b>{E(str(first.get('answer')))}</b></p><table><tr><th>completion</th>"
                         f"<th>reward</th>{head}<th>advantage</th></tr>{body}</table></div>")
        more = len(rows) - page.max_rows
        note = f"<p>{more} more rows at this step not shown (max_rows)</p>" if more > 0 else ""
        pages.append((f"step {step}", "".join(parts) + note))
    return page.pager(pages, "step")


def _completion(m: dict) -> str:
    turns = m.get("turns")
    if turns:
        return "".join(f"<b>{E(t.get('role', ''))}:</b> {E(str(t.get('text', '')))}\n" for t in turns)
    cut = " <i>(truncated)</i>" if m.get("truncated") else ""
    return E(str(m.get("completion", ""))) + cut


def samples_browser(page: Page, files: list[Path]) -> str:
    """Each samples file, ``max_rows`` docs a page: question, media, response, parsed answer, target, scores."""
    pages = []
    for path in files:
        records = read_jsonl(path)
        metrics = sorted({k for r in records for k in (r.get("scores") or {})})
        means = ", ".join(f"{m} {_mean(records, m):.3f}" for m in metrics)
        for start in range(0, max(len(records), 1), page.max_rows):
            chunk = records[start:start + page.max_rows]
            rows = "".join(
                f"<tr class=\"sample\"><td>{E(str(r.get('doc_id')))}</td><td>{page.media(r.get('media', []))}</td>"
                f"<td><pre>{E(_question(r.get('prompt', '')))}</pre></td><td><pre>{E(str(r.get('response', '')))}"
                f"</pre></td><td>{E(str(r.get('parsed_answer', '')))}</td><td>{E(str(r.get('target')))}</td>"
                + "".join(f"<td>{_fmt((r.get('scores') or {}).get(m))}</td>" for m in metrics)
                + (f"<td>{E(str(r['error']))}</td>" if "error" in r else "<td></td>") + "</tr>" for r in chunk)
            head = "".join(f"<th>{E(m)}</th>" for m in metrics)
            title = f"{path.name} ({means})" + (f" rows {start + 1}–{start + len(chunk)}" if len(records) > page.max_rows
                                                else "")
            pages.append((title, f"<table><tr><th>doc</th><th>media</th><th>question</th><th>response</th><th>parsed"
                                 f"</th><th>target</th>{head}<th>error</th></tr>{rows}</table>"))
    return page.pager(pages, "samples file")


def _mean(records: list[dict], metric: str) -> float:
    vals = [v for v in ((r.get("scores") or {}).get(metric) for r in records) if _num(v) is not None]
    return sum(vals) / len(vals) if vals else math.nan


def _question(prompt: str) -> str:
    """The last user turn of a rendered chat, without template markers (the text otherwise)."""
    if "<|im_start|>user" in prompt:
        prompt = prompt.rsplit("<|im_start|>user", 1)[1].split("<|im_end|>")[0]
    for marker in ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"):
        prompt = prompt.replace(marker, "")
    return prompt.strip()


def kind_of(path: Path) -> str:
    if (path / "metrics.jsonl").exists():
        return "run"
    if path.is_file() and path.name.endswith(".jsonl") or any(path.rglob("*_samples_*.jsonl")):
        return "eval"
    raise FileNotFoundError(f"{str(path)!r} is neither a run directory (metrics.jsonl) nor an eval directory or "
                            "samples file (*_samples_*.jsonl)")


def build_report(paths: list[str | Path], max_rows: int = 50) -> str:
    """The HTML of one directory's report, or of two compared."""
    dirs = [Path(p) for p in paths]
    if not 1 <= len(dirs) <= 2:
        raise ValueError(f"mmreason report takes one or two directories, not {len(dirs)}")
    kinds = [kind_of(d) for d in dirs]
    page = Page(max_rows, [d if d.is_dir() else d.parent for d in dirs] + [d.parent for d in dirs])
    body = []
    if len(dirs) == 2 and kinds == ["run", "run"]:
        both = [curves(read_jsonl(d / "metrics.jsonl"), f"{tag}: ") for tag, d in zip("AB", dirs)]
        charts = "".join(line_chart(t, {**a, **b}) for (t, a), (_, b) in zip(*both))
        body.append(f"<h1>A: {E(str(dirs[0]))} vs B: {E(str(dirs[1]))}</h1><h2>Curves, A and B</h2>"
                    f'<div class="charts">{charts}</div>')
    for tag, d, kind in zip("AB" if len(dirs) == 2 else " ", dirs, kinds):
        title = f"{tag.strip() + ': ' if tag.strip() else ''}{d}"
        if kind == "run":
            body.append(f"<h1>Run {E(title)}</h1>" + run_section(page, d))
        else:
            files = [d] if d.is_file() else sorted(d.rglob("*_samples_*.jsonl"), key=_step_order)
            body.append(f"<h1>Eval {E(title)}</h1>" + samples_browser(page, files))
    return page.document(" vs ".join(map(str, dirs)), "".join(body))


def write_report(paths: list[str | Path], out: str | Path | None = None, max_rows: int = 50) -> Path:
    """Write the report (default ``<first dir>/report.html``, ``compare.html`` for two) and return its path."""
    first = Path(paths[0])
    target = Path(out) if out else (first if first.is_dir() else first.parent) / (
        "compare.html" if len(paths) == 2 else "report.html")
    target.write_text(build_report(paths, max_rows), encoding="utf-8")
    return target
