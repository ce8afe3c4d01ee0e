"""The alarms: one pure function per alarm over the step metric rows logged so far.

Each takes ``rows`` (the ``metrics.jsonl`` rows up to now, oldest first, each a dict with ``step``, or the
bounded ``History`` of them that ``HealthMonitor`` keeps) and its config section (``mmreason.health.config``)
and returns a one-line reason when the alarm holds at the last row, else None. They read only logged
metrics, so they run the same on a live run and on a finished one
(``mmreason report`` replays them). Thresholds and their calibration: docs/health.md.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

from mmreason.health import config as hc

Rows = list[dict[str, Any]]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


class History:
    """The rows logged so far, as the alarms read them, in memory and time per row independent of the run's
    length: for each numeric key the first ``head`` and the last ``tail`` values of the training rows and
    their count; the last ``tail`` training rows' steps and reward means (``reward/mean``,
    ``rewards/<name>/mean``); the ``eval/...`` values of the last ``2 * tail`` rows that hold any; the last row.
    ``tail=None`` keeps everything (``History.of(rows)`` for a list). While steps increase, each alarm gives
    the same answer on it as on the whole list of rows (tests/health/test_report_bounds.py checks this)."""

    MAX_KEYS = 1000  # keys followed (a row of a million keys must not make a million deques)

    def __init__(self, *, tail: int | None = None, head: int | None = None) -> None:
        self.tail, self.head = tail, head
        self.tails: dict[str, deque[float]] = {}
        self.heads: dict[str, list[float]] = {}
        self.counts: dict[str, int] = {}
        self.windows: deque[dict[str, Any]] = deque(maxlen=tail)  # training rows: step + reward means
        self.evals: deque[tuple[Any, dict[str, float]]] = deque(maxlen=2 * tail if tail else None)
        self.last: dict[str, Any] = {}
        self.n_steps = 0

    @classmethod
    def of(cls, rows: Rows | History) -> History:
        if isinstance(rows, History):
            return rows
        history = cls()
        for row in rows:
            history.add(row)
        return history

    def add(self, row: dict[str, Any]) -> None:
        self.last = row
        step_row = _is_step(row)
        evals: dict[str, float] = {}
        window: dict[str, Any] = {"step": row.get("step")}  # kept for a training row only
        for key, raw in row.items():  # one pass: this runs after every training step
            if type(raw) is float:
                if raw - raw != 0.0:  # NaN or infinite
                    continue
                value = raw
            elif isinstance(raw, (int, float)) and math.isfinite(raw):  # ints, bools (as _num takes them)
                value = float(raw)
            else:
                continue
            if key.startswith("eval/"):
                if not key.endswith("/n_failed"):
                    evals[key] = value
            if not step_row:
                continue
            if key == "reward/mean" or (key.startswith("rewards/") and key.endswith("/mean")):
                window[key] = raw
            tail = self.tails.get(key)
            if tail is None:
                if len(self.tails) >= self.MAX_KEYS:
                    continue
                tail = self.tails[key] = deque(maxlen=self.tail)
                self.heads[key], self.counts[key] = [], 0
            tail.append(value)
            self.counts[key] += 1
            if self.head is None or len(self.heads[key]) < self.head:
                self.heads[key].append(value)
        if evals:
            self.evals.append((row.get("step", -1), evals))
        if step_row:
            self.n_steps += 1
            self.windows.append(window)

    def values(self, key: str) -> list[float]:
        """The last values of ``key`` kept (all of them for ``tail=None``)."""
        return list(self.tails.get(key, ()))


def _series(rows: Rows, key: str) -> list[float]:
    return [v for v in (_num(r.get(key)) for r in rows) if v is not None]


def _last(rows: Rows | History, key: str, n: int) -> list[float] | None:
    """The last ``n`` training rows' values of ``key``, or None when fewer rows have it."""
    history = History.of(rows)
    vals = history.values(key)
    return vals[-n:] if history.counts.get(key, 0) >= n else None


def _is_step(row: dict) -> bool:
    """A training step's row (not the eval-only row logged before step 1)."""
    return "reward/mean" in row or "loss" in row


def fitted_rise(values: list[float]) -> tuple[float, float]:
    """(rise, z) of a least-squares line through ``values`` at x = 0..n-1: rise = slope * (n - 1), z = slope
    over its standard error (inf for a noiseless line). For [0.1, 0.2, 0.3]: slope 0.1, rise 0.2, z inf."""
    n = len(values)
    if n < 3:
        return 0.0, 0.0
    mx, my = (n - 1) / 2, sum(values) / n
    sxx = sum((x - mx) ** 2 for x in range(n))
    slope = sum((x - mx) * (y - my) for x, y in enumerate(values)) / sxx
    resid = sum((y - my - slope * (x - mx)) ** 2 for x, y in enumerate(values)) / (n - 2)
    se = math.sqrt(resid / sxx)
    exact = se <= 1e-9 * abs(slope)  # a straight line (up to rounding)
    return slope * (n - 1), (math.copysign(math.inf, slope) if exact and slope else slope / se if se else 0.0)


def reward_hacking(rows: Rows | History, c: hc.RewardHacking) -> str | None:
    """The training reward (``reward/mean`` or a ``rewards/<name>/mean``) rose over the last ``window``
    steps (fitted rise >= ``min_reward_rise`` and >= ``min_z`` standard errors) while no held-out metric
    ``eval/<task>/<metric>`` logged in the window (from its first step on) rose by ``min_eval_rise`` or
    stands at ``ceiling``. Needs two held-out points in the window; without them it cannot judge."""
    history = History.of(rows)
    if history.n_steps < c.window:
        return None
    window = list(history.windows)[-c.window :]
    first = window[0]["step"] - 1  # the eval row of the step before the window counts as its start
    evals: dict[str, list[float]] = {}
    for step, scores in history.evals:
        if isinstance(step, (int, float)) and step >= first:
            for k, v in scores.items():
                evals.setdefault(k, []).append(v)
    evals = {k: v for k, v in evals.items() if len(v) >= 2}
    if not evals or any(v[-1] - v[0] >= c.min_eval_rise or v[-1] >= c.ceiling for v in evals.values()):
        return None
    keys = ["reward/mean"] + sorted(k for k in window[-1] if k.startswith("rewards/") and k.endswith("/mean"))
    for key in keys:
        values = _series(window, key)
        if len(values) < c.window // 2:
            continue
        rise, z = fitted_rise(values)
        if rise >= c.min_reward_rise and z >= c.min_z:
            held = ", ".join(f"{k} {v[0]:.2f} -> {v[-1]:.2f}" for k, v in sorted(evals.items()))
            return (
                f"{key} rose {rise:+.3f} over {c.window} steps (z={z:.1f}) while the held-out metrics did not ({held})"
            )
    return None


def answer_collapse(rows: Rows | History, c: hc.AnswerCollapse) -> str | None:
    """``answers/top_share`` >= ``min_share`` and >= ``answers/gold_top_share`` + ``min_excess`` with at least
    two distinct gold answers (``answers/golds``), ``steps`` steps in a row."""
    history = History.of(rows)
    top, gold, golds = (
        _last(history, k, c.steps) for k in ("answers/top_share", "answers/gold_top_share", "answers/golds")
    )
    if top is None or gold is None or golds is None:
        return None
    if all(t >= c.min_share and t - g >= c.min_excess and n >= 2 for t, g, n in zip(top, gold, golds)):
        answer = history.last.get("answers/top", "")
        return (
            f"one answer ({answer!r}) is {top[-1]:.0%} of the completions while the most common gold answer "
            f"is {gold[-1]:.0%} of the prompts, {c.steps} steps in a row"
        )
    return None


def entropy_collapse(rows: Rows | History, c: hc.EntropyCollapse) -> str | None:
    """``entropy`` below ``min_ratio`` x its mean over the first ``baseline_steps`` steps, ``steps`` in a row."""
    history = History.of(rows)
    if history.counts.get("entropy", 0) < c.baseline_steps + c.steps:
        return None
    base = sum(history.heads["entropy"][: c.baseline_steps]) / c.baseline_steps
    last = history.values("entropy")[-c.steps :]
    if base > 0 and all(v < c.min_ratio * base for v in last):
        return f"entropy {last[-1]:.3f} < {c.min_ratio} x its start {base:.3f}, {c.steps} steps in a row"
    return None


def kl_blowup(rows: Rows | History, c: hc.KLBlowup) -> str | None:
    """``kl`` above ``max_kl``, or above ``min_kl`` and ``spike_ratio`` x the median of the ``window`` before."""
    series = History.of(rows).values("kl")
    if not series:
        return None
    kl = series[-1]
    if kl > c.max_kl:
        return f"kl {kl:.3f} > max_kl {c.max_kl}"
    before = sorted(series[-c.window - 1 : -1])
    if len(before) >= 3 and kl > c.min_kl:
        median = before[len(before) // 2]
        if kl > c.spike_ratio * median:
            return f"kl {kl:.3f} > {c.spike_ratio} x its recent median {median:.4f}"
    return None


def no_signal(rows: Rows | History, c: hc.NoSignal) -> str | None:
    """``frac_reward_zero_std`` (groups whose rewards are all equal) >= ``max_share``, ``steps`` in a row."""
    values = _last(rows, "frac_reward_zero_std", c.steps)
    if values is not None and all(v >= c.max_share for v in values):
        return f"{values[-1]:.0%} of groups have equal rewards (no advantage), {c.steps} steps in a row"
    return None


def truncated(rows: Rows | History, c: hc.Truncated) -> str | None:
    """``completion/clipped_ratio`` or ``episodes/cut_share`` >= ``max_share``, ``steps`` in a row."""
    for key, what in (
        ("completion/clipped_ratio", "completions cut at max_completion_length"),
        ("episodes/cut_share", "episodes cut by a limit"),
    ):
        values = _last(rows, key, c.steps)
        if values is not None and all(v >= c.max_share for v in values):
            return f"{values[-1]:.0%} of {what}, {c.steps} steps in a row"
    return None


def logprob_mismatch(rows: Rows | History, c: hc.LogprobMismatch) -> str | None:
    """``mismatch/logprob_abs_diff_mean`` (mean |sampler - trainer| log-prob on the sampled tokens, logged by the
    trainer when the rollout backend returns log-probs: vLLM) > ``max_mean_abs``, ``steps`` in a row."""
    values = _last(rows, "mismatch/logprob_abs_diff_mean", c.steps)
    if values is not None and all(v > c.max_mean_abs for v in values):
        return f"sampler and trainer log-probs differ by {values[-1]:.3f} on average, {c.steps} steps in a row"
    return None


ALARMS: dict[str, Callable[[Rows | History, Any], str | None]] = {
    "reward_hacking": reward_hacking,
    "answer_collapse": answer_collapse,
    "entropy_collapse": entropy_collapse,
    "kl_blowup": kl_blowup,
    "no_signal": no_signal,
    "truncated": truncated,
    "logprob_mismatch": logprob_mismatch,
}


# The metric keys each alarm reads (besides STEP_KEYS, which tell a step's row from the eval-only row).
# tests/health/test_alarm_inputs.py checks that every alarm reads only these and that the trainer writes
# each of them, so an alarm cannot wait on a key nothing logs.
STEP_KEYS = ("reward/mean", "loss")
INPUTS: dict[str, tuple[str, ...]] = {
    "reward_hacking": ("reward/mean",),  # and every rewards/<name>/mean, eval/<task>/<metric> logged
    "answer_collapse": ("answers/top_share", "answers/gold_top_share", "answers/golds", "answers/top"),
    "entropy_collapse": ("entropy",),
    "kl_blowup": ("kl",),
    "no_signal": ("frac_reward_zero_std",),
    "truncated": ("completion/clipped_ratio", "episodes/cut_share"),
    "logprob_mismatch": ("mismatch/logprob_abs_diff_mean",),
}


def history_for(cfg: hc.HealthConfig) -> History:
    """An empty ``History`` that keeps just what the alarms of ``cfg`` look back on: O(1) per row."""
    sections = [getattr(cfg, name) for name in ALARMS]
    tail = max(max(getattr(c, "window", 0) + 1, getattr(c, "steps", 0)) for c in sections)
    return History(tail=tail, head=cfg.entropy_collapse.baseline_steps)


def check_all(rows: Rows | History, cfg: hc.HealthConfig) -> dict[str, str | None]:
    """Every enabled alarm's reason (None = quiet) at the last row."""
    if not cfg.enabled:
        return {}
    return {name: fn(rows, getattr(cfg, name)) for name, fn in ALARMS.items() if getattr(cfg, name).enabled}
