"""Inline SVG for the report: line charts of step metrics and the alarm timeline (no plotting library,
no script: the page draws from disk in any browser)."""

from __future__ import annotations

import html
import math

from mmreason.health.downsample import Ranges, downsample

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 420, 200, 46, 10, 24, 26


def _ticks(lo: float, hi: float) -> list[float]:
    return [lo + (hi - lo) * i / 4 for i in range(5)]


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], css_class: str = "chart") -> str:
    """One chart: each series a polyline of (step, value) points (points with a marker where a series
    has fewer than 12, e.g. the held-out evals). Returns '' when no series has a finite point."""
    series = {k: downsample([(x, y) for x, y in pts if math.isfinite(y)]) for k, pts in series.items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return ""
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(ys), max(ys)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def px(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def py(y: float) -> float:
        return H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_T - PAD_B)

    out = [
        f'<svg class="{css_class}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 16 * len(series)}"'
        f' viewBox="0 0 {W} {H + 16 * len(series)}"><title>{html.escape(title)}</title>',
        f'<text x="{PAD_L}" y="14" font-size="12" font-weight="bold">{html.escape(title)}</text>',
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" height="{H - PAD_T - PAD_B}" fill="none" '
        'stroke="#ccc"/>',
    ]
    for t in _ticks(y0, y1):
        out.append(f'<text x="{PAD_L - 4}" y="{py(t) + 4:.1f}" font-size="9" text-anchor="end">{_fmt(t)}</text>')
    for t in _ticks(x0, x1):
        out.append(f'<text x="{px(t):.1f}" y="{H - PAD_B + 12}" font-size="9" text-anchor="middle">{t:.0f}</text>')
    for i, (name, pts) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(
            f'<polyline class="series" data-name="{html.escape(name[:200])}" fill="none" stroke="{colour}" '
            f'stroke-width="1.5" points="{path}"/>'
        )
        if len(pts) < 12:
            out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in pts]
        ly = H + 12 + 16 * i
        out.append(
            f'<rect x="{PAD_L}" y="{ly - 8}" width="10" height="3" fill="{colour}"/>'
            f'<text x="{PAD_L + 14}" y="{ly - 4}" font-size="10">{html.escape(name[:200])} '
            f"(last {_fmt(pts[-1][1])})</text>"
        )
    out.append("</svg>")
    return "".join(out)


def alarm_timeline(first: int | None, last: int | None, on: dict[str, Ranges], reasons: dict[str, str]) -> str:
    """One row per alarm; a red mark over each range of steps it held (its reason on hover); empty for a log
    without steps."""
    if first is None or last is None or not on:
        return ""
    x0, x1 = first, max(last, first + 1)
    left, width, row = 130, 560, 18

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * width

    h = 20 + row * len(on)
    out = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" height="{h}">']
    for i, (name, held) in enumerate(on.items()):
        y = 14 + i * row
        out.append(
            f'<text x="{left - 6}" y="{y + 4}" font-size="11" text-anchor="end">{html.escape(name[:60])}</text>'
            f'<line x1="{left}" x2="{left + width}" y1="{y}" y2="{y}" stroke="#ddd"/>'
        )
        tip = html.escape(reasons.get(name, "")[:300])
        mark = max(width / max(x1 - x0, 1), 2)
        for a, b in held.ranges:
            steps = f"step {a:.0f}" if a == b else f"steps {a:.0f}–{b:.0f}"
            out.append(
                f'<rect class="alarm-mark" x="{px(a) - mark / 2:.1f}" y="{y - 5}" '
                f'width="{px(b) - px(a) + mark:.1f}" height="10" fill="#d62728"><title>{steps}: {tip}'
                "</title></rect>"
            )
    out.append(
        f'<text x="{left}" y="{h - 2}" font-size="9">step {x0}</text>'
        f'<text x="{left + width}" y="{h - 2}" font-size="9" text-anchor="end">step {x1}</text></svg>'
    )
    return "".join(out)
