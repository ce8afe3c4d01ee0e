"""The alarms: one pure function per alarm over the step metric rows logged so far.

Each takes ``rows`` (the ``metrics.jsonl`` rows up to now, oldest first, each a dict with ``step``) and its
config section (``mmreason.health.config``) and returns a one-line reason when the alarm holds at the last
row, else None. They read only logged metrics, so they run the same on a live run and on a finished one
(``mmreason report`` replays them). Thresholds and their calibration: docs/health.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from mmreason.health import config as hc

Rows = list[dict[str, Any]]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _series(rows: Rows, key: str) -> list[float]:
    return [v for v in (_num(r.get(key)) for r in rows) if v is not None]


def _last(rows: Rows, key: str, n: int) -> list[float] | None:
    """The last ``n`` training rows' values of ``key``, or None when fewer rows have it."""
    vals = _series([r for r in rows if _is_step(r)], key)
    return vals[-n:] if len(vals) >= n else None


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


def reward_hacking(rows: Rows, c: hc.RewardHacking) -> str | None:
    """The training reward (``reward/mean`` or a ``rewards/<name>/mean``) rose over the last ``window``
    steps (fitted rise >= ``min_reward_rise`` and >= ``min_z`` standard errors) while no held-out metric
    ``eval/<task>/<metric>`` logged in the window (from its first step on) rose by ``min_eval_rise`` or
    stands at ``ceiling``. Needs two held-out points in the window; without them it cannot judge."""
    steps = [r for r in rows if _is_step(r)]
    if len(steps) < c.window:
        return None
    window = steps[-c.window:]
    first = window[0]["step"] - 1  # the eval row of the step before the window counts as its start
    evals: dict[str, list[float]] = {}
    for r in rows:
        if r.get("step", -1) >= first:
            for k, v in r.items():
                if k.startswith("eval/") and not k.endswith("/n_failed") and _num(v) is not None:
                    evals.setdefault(k, []).append(float(v))
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
            return (f"{key} rose {rise:+.3f} over {c.window} steps (z={z:.1f}) while the held-out metrics did "
                    f"not ({held})")
    return None


def answer_collapse(rows: Rows, c: hc.AnswerCollapse) -> str | None:
    """``answers/top_share`` >= ``min_share`` and >= ``answers/gold_top_share`` + ``min_excess`` with at least
    two distinct gold answers (``answers/golds``), ``steps`` steps in a row."""
    top, gold, golds = (_last(rows, k, c.steps) for k in ("answers/top_share", "answers/gold_top_share",
                                                           "answers/golds"))
    if top is None or gold is None or golds is None:
        return None
    if all(t >= c.min_share and t - g >= c.min_excess and n >= 2 for t, g, n in zip(top, gold, golds)):
        answer = rows[-1].get("answers/top", "")
        return (f"one answer ({answer!r}) is {top[-1]:.0%} of the completions while the most common gold answer "
                f"is {gold[-1]:.0%} of the prompts, {c.steps} steps in a row")
    return None


def entropy_collapse(rows: Rows, c: hc.EntropyCollapse) -> str | None:
    """``entropy`` below ``min_ratio`` x its mean over the first ``baseline_steps`` steps, ``steps`` in a row."""
    series = _series([r for r in rows if _is_step(r)], "entropy")
    if len(series) < c.baseline_steps + c.steps:
        return None
    base = sum(series[: c.baseline_steps]) / c.baseline_steps
    if base > 0 and all(v < c.min_ratio * base for v in series[-c.steps:]):
        return f"entropy {series[-1]:.3f} < {c.min_ratio} x its start {base:.3f}, {c.steps} steps in a row"
    return None


def kl_blowup(rows: Rows, c: hc.KLBlowup) -> str | None:
    """``kl`` above ``max_kl``, or above ``min_kl`` and ``spike_ratio`` x the median of the ``window`` before."""
    series = _series([r for r in rows if _is_step(r)], "kl")
    if not series:
        return None
    kl = series[-1]
    if kl > c.max_kl:
        return f"kl {kl:.3f} > max_kl {c.max_kl}"
    before = sorted(series[-c.window - 1:-1])
    if len(before) >= 3 and kl > c.min_kl:
        median = before[len(before) // 2]
        if kl > c.spike_ratio * median:
            return f"kl {kl:.3f} > {c.spike_ratio} x its recent median {median:.4f}"
    return None


def no_signal(rows: Rows, c: hc.NoSignal) -> str | None:
    """``frac_reward_zero_std`` (groups whose rewards are all equal) >= ``max_share``, ``steps`` in a row."""
    values = _last(rows, "frac_reward_zero_std", c.steps)
    if values is not None and all(v >= c.max_share for v in values):
        return f"{values[-1]:.0%} of groups have equal rewards (no advantage), {c.steps} steps in a row"
    return None


def truncated(rows: Rows, c: hc.Truncated) -> str | None:
    """``completion/clipped_ratio`` or ``episodes/cut_share`` >= ``max_share``, ``steps`` in a row."""
    for key, what in (("completion/clipped_ratio", "completions cut at max_completion_length"),
                      ("episodes/cut_share", "episodes cut by a limit")):
        values = _last(rows, key, c.steps)
        if values is not None and all(v >= c.max_share for v in values):
            return f"{values[-1]:.0%} of {what}, {c.steps} steps in a row"
    return None


def logprob_mismatch(rows: Rows, c: hc.LogprobMismatch) -> str | None:
    """``mismatch/logprob_abs_diff_mean`` (mean |sampler - trainer| log-prob on the sampled tokens, logged by the
    trainer when the rollout backend returns log-probs: vLLM) > ``max_mean_abs``, ``steps`` in a row."""
    values = _last(rows, "mismatch/logprob_abs_diff_mean", c.steps)
    if values is not None and all(v > c.max_mean_abs for v in values):
        return f"sampler and trainer log-probs differ by {values[-1]:.3f} on average, {c.steps} steps in a row"
    return None


ALARMS: dict[str, Callable[[Rows, Any], str | None]] = {
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


def check_all(rows: Rows, cfg: hc.HealthConfig) -> dict[str, str | None]:
    """Every enabled alarm's reason (None = quiet) at the last row."""
    if not cfg.enabled:
        return {}
    return {name: fn(rows, getattr(cfg, name)) for name, fn in ALARMS.items() if getattr(cfg, name).enabled}
