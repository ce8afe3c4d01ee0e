"""The alarms inside a run: after each step, check every enabled alarm over the rows so far.

``HealthMonitor.check(step, metrics)`` returns ``alarm/<name>`` (1.0 while the alarm holds, else 0.0) for
the step's metrics row. When an alarm starts to hold it writes one ``alarm`` event to ``events.log`` and one
line above the progress bar; it speaks again only after the alarm has been quiet (it does not repeat
every step). The alarms themselves are pure functions of the rows (``mmreason.health.alarms``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mmreason.health.alarms import check_all
from mmreason.health.config import HealthConfig


class HealthMonitor:
    def __init__(self, cfg: HealthConfig, event: Callable[..., None], say: Callable[[str], None] = print,
                 rows: list[dict[str, Any]] | None = None):
        self.cfg, self.event, self.say = cfg, event, say
        self.rows: list[dict[str, Any]] = list(rows or [])
        self.active: set[str] = set()
        self.raised: list[tuple[int, str, str]] = []  # (step, alarm, reason) of each time one started to hold

    def check(self, step: int, metrics: dict[str, Any]) -> dict[str, float]:
        """``alarm/<name>`` of this step; ``metrics`` joins the history (an eval-only row too, ``step`` 0)."""
        self.rows.append({"step": step, **metrics})
        if not self.cfg.enabled:
            return {}
        out = {}
        for name, reason in check_all(self.rows, self.cfg).items():
            out[f"alarm/{name}"] = float(reason is not None)
            if reason is None:
                self.active.discard(name)
            elif name not in self.active:
                self.active.add(name)
                self.raised.append((step, name, reason))
                self.event("alarm", alarm=name, step=step, reason=reason)
                self.say(f"ALARM step {step}: {name}: {reason}")
        self.rows[-1].update(out)
        return out
