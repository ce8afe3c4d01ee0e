"""Evidence rewards: did the model point at the right pages of a document or the right moments of a video?

- ``page_fbeta``: DocSeeker's page reward, F-beta (beta = 2) of the cited evidence pages;
- ``temporal_iou``: IoU of the answered time span with the gold window(s);
- ``timestamp_hit``: answered time points, 1 inside the gold window, decaying with distance outside.

MedScope's tool-localisation reward (``tool_grounding``) lives in its pack (``tasks/medscope/rewards.py``) and
reads its spans with the helpers here (``gold_spans``, ``tiou``, ``decay``, ``decay_tau``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from mmreason.parsing import all_tag_bodies, clip, last_tag_body, parse_dict, squeeze_space
from mmreason.rewarding import column, per_sample, reward
from mmreason.types import Sample

Span = tuple[float, float]

# ---- pages (DocSeeker) -------------------------------------------------------------------------


def fbeta(predicted: set, gold: set, beta: float = 2.0) -> float:
    """F-beta of a predicted page set against the gold set; 0 when either is empty or they are disjoint.

    p = |P & T| / |P|,  q = |P & T| / |T|,  F = (1 + b^2) p q / (b^2 p + q)
    """
    hits = len(predicted & gold)
    if not predicted or not gold or hits == 0:
        return 0.0
    p, q = hits / len(predicted), hits / len(gold)
    return (1 + beta**2) * p * q / (beta**2 * p + q)


def _pages(values: Any, limit: int = 1_000) -> set[int]:
    """Integer page numbers from a (possibly nested once) list; anything else is ignored."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    out: set[int] = set()
    for item in list(values)[:limit]:
        for v in item if isinstance(item, (list, tuple)) else [item]:
            if isinstance(v, bool):
                continue
            if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
                out.add(int(v))
    return out


def cited_pages(text: str) -> set[int] | None:
    """``evidence_pages`` of the completion's ``<answer>`` dict (None when there is no dict answer)."""
    answer = parse_dict(last_tag_body(clip(text), "answer"))
    if answer is None:
        return None
    return _pages(answer.get("evidence_pages") or [])


@reward("page_fbeta")
@per_sample
def page_fbeta(sample, trajectory, *, beta: float = 2.0, index_base: int = 1):
    """DocSeeker page reward: F-beta (beta=2) of the answer dict's evidence_pages vs the gold pages.

    Columns: ``evidence_pages`` (gold pages, 1-based as the prompt labels them; ``index_base=0`` for
    0-based data such as DocSeeker's raw ``gt_page``). Gold ``[-1]`` (or empty) means "no specific
    evidence page": the reward is None, and a total with ``RewardBatch.total(missing="renormalize")``
    reproduces DocSeeker's rule ``(0.1 R_fmt + 0.6 R_ans) / 0.7``. No dict answer scores 0.
    Source: DocSeeker ``EviGRPO_reward.py::page_reward``; docs/methods/packs.md#docseeker.
    """
    raw = column(sample, "evidence_pages")
    gold = _pages(raw if raw is not None else [])
    if not gold or gold == {-1}:
        return None
    gold = {g + (1 - index_base) for g in gold}
    cited = cited_pages(trajectory.completion_text)
    return 0.0 if cited is None else fbeta(cited, gold, beta)


# ---- time spans ---------------------------------------------------------------------------------

_TIME = r"(?:\d{1,2}:)?\d{1,2}:\d{2}(?:\.\d+)?|\d+(?:\.\d+)?"
_BRACKET_SPAN = re.compile(
    rf"[\[\(]\s*({_TIME})\s*(?:s|sec|seconds)?\s*[,;\-–]\s*({_TIME})\s*(?:s|sec|seconds)?\s*[\]\)]"
)
# starts only where a number starts: a match attempt inside a long digit run would rescan it (quadratic)
_WORD_SPAN = re.compile(rf"(?<![\d.:])({_TIME})\s*(?:s|sec|seconds)?\s*(?:-|–|to|until)\s*({_TIME})", re.IGNORECASE)
_TIME_POINT = re.compile(r"(?<![\w.:])((?:\d{1,2}:)?\d{1,2}:\d{2}(?:\.\d+)?|\d+(?:\.\d+)?\s*(?:s|sec|seconds)\b)")
_BARE_TIME = re.compile(r"\s*(\d+(?:\.\d+)?)\s*")


def seconds(token: str) -> float:
    """'75', '1:15', '0:01:15.5' -> seconds."""
    value = 0.0
    for part in token.split(":"):
        value = value * 60 + float(part)
    return value


def tiou(a: Span, b: Span) -> float:
    """Temporal IoU ``|a & b| / |a | b|`` of two intervals (0 when the union is empty)."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def gold_spans(value: Any) -> list[Span]:
    """The ``span`` column as a list of (start, end): one [s, e] pair or a list of pairs."""
    if not isinstance(value, (list, tuple)) or not value:
        return []
    pairs = [value] if not isinstance(value[0], (list, tuple)) else list(value)
    spans = []
    for pair in pairs:
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            try:
                s, e = float(pair[0]), float(pair[1])
            except (TypeError, ValueError):
                continue
            if math.isfinite(s) and math.isfinite(e):
                spans.append((min(s, e), max(s, e)))
    return spans


def answered_span(text: str) -> Span | None:
    """The time span the completion answers: ``<span>[s, e]</span>``, else the last "[s, e]" or "s to e"
    in the answer (times in seconds, or m:ss / h:mm:ss)."""
    text = clip(text, 20_000)
    region = last_tag_body(text, "span") or last_tag_body(text, "answer") or text
    region = squeeze_space(region[-2_000:])  # the span patterns chain \s* runs
    for pattern in (_BRACKET_SPAN, _WORD_SPAN):
        matches = list(pattern.finditer(region))
        if matches:
            s, e = seconds(matches[-1].group(1)), seconds(matches[-1].group(2))
            if not (math.isfinite(s) and math.isfinite(e)):  # a 400-digit time is invalid, not infinity
                return None
            return (min(s, e), max(s, e))
    return None


def time_points(text: str, limit: int = 32) -> list[float]:
    """Time points the completion answers: the ``<time>`` bodies (bare numbers are seconds); else the
    times written as times in the ``<answer>`` ("1:15", "75 s", "75 seconds"), or an answer that is a
    bare number. Other numbers in the answer ("3 people") are not times."""
    text = clip(text, 20_000)
    bodies = all_tag_bodies(text, "time", limit)
    if bodies:
        points = [
            seconds(_strip_unit(b)) for b in bodies if _TIME_POINT.fullmatch(b.strip()) or _BARE_TIME.fullmatch(b)
        ]
    else:
        answer = (last_tag_body(text, "answer") or "")[-2_000:]
        if _BARE_TIME.fullmatch(answer):
            points = [float(answer)]
        else:
            points = [seconds(_strip_unit(m.group(1))) for m in _TIME_POINT.finditer(answer)][:limit]
    return [p for p in points if math.isfinite(p)]  # a 400-digit time is invalid, not infinity


def _strip_unit(token: str) -> str:
    return re.sub(r"\s*(?:s|sec|seconds)$", "", token.strip())


def decay(t: float, spans: list[Span], tau: float) -> float:
    """1 if ``t`` lies in a gold span, else ``exp(-distance / tau)`` to the nearest one."""
    dist = min(0.0 if s <= t <= e else min(abs(t - s), abs(t - e)) for s, e in spans)
    return 1.0 if dist == 0 else (math.exp(-dist / tau) if tau > 0 else 0.0)


def video_duration(sample: Sample) -> float | None:
    """The ``duration`` column, else the length of the first video window when it has an end."""
    duration = column(sample, "duration")
    if duration is not None:
        try:
            return float(duration)
        except (TypeError, ValueError):
            return None
    if sample.videos and sample.videos[0].end is not None:
        return float(sample.videos[0].end) - float(sample.videos[0].start or 0.0)
    return None


def decay_tau(sample: Sample, spans: list[Span], tau: float | None, tau_frac: float) -> float:
    """The decay scale of ``decay``: ``tau`` seconds when given, else ``tau_frac`` x the video's length (its
    ``duration`` column or window, else the latest gold end)."""
    if tau is not None:
        return tau
    duration = video_duration(sample) or max(e for _, e in spans)
    return tau_frac * duration


@reward("temporal_iou")
@per_sample
def temporal_iou(sample, trajectory):
    """tIoU of the answered span (<span>[s, e]</span> or "[s, e]" / "s to e") with the gold window(s).

    Columns: ``span`` ([start, end] seconds, or a list of windows: the best counts). None without a gold
    span; 0 when no span can be read. Source: MedScope (proposed form); docs/methods/packs.md#medscope.
    """
    return span_tiou(column(sample, "span"), trajectory.completion_text)


def span_tiou(gold: Any, completion: str) -> float | None:
    """Best tIoU of the completion's answered span with the gold window(s) (``gold_spans`` reads ``gold``):
    None without a gold window, 0 when no span can be read."""
    spans = gold_spans(gold)
    if not spans:
        return None
    pred = answered_span(completion)
    return 0.0 if pred is None else max(tiou(pred, g) for g in spans)


@reward("timestamp_hit")
@per_sample
def timestamp_hit(sample, trajectory, *, tau: float | None = None, tau_frac: float = 0.05):
    """Mean over answered time points of 1 (inside the gold window) or exp(-distance / tau) outside.

    Time points: ``<time>t</time>`` bodies, else times in the ``<answer>``. tau = ``tau`` seconds, or
    ``tau_frac`` (0.05) x video length (``duration`` column or the video window). Columns: ``span``,
    ``duration`` (optional). None without a gold span; 0 with no time point.
    """
    spans = gold_spans(column(sample, "span"))
    if not spans:
        return None
    points = time_points(trajectory.completion_text)
    if not points:
        return 0.0
    scale = decay_tau(sample, spans, tau, tau_frac)
    return sum(decay(t, spans, scale) for t in points) / len(points)
