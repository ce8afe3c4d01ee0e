"""The alarms inside a run: after each step, check every enabled alarm over the rows so far.

``HealthMonitor.check(step, metrics)`` returns ``alarm/<name>`` (1.0 while the alarm holds, else 0.0) for
the step's metrics row. When an alarm starts to hold it writes one ``alarm`` event to ``events.log`` and one
line above the progress bar; it speaks again only after the alarm has been quiet (it does not repeat
every step). The alarms themselves are pure functions of the rows (``mmreason.health.alarms``); the monitor
keeps only the bounded ``History`` of them the alarms look back on, so a check costs the same at step 50,000
as at step 50.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from mmreason.health.alarms import check_all, history_for
from mmreason.health.config import HealthConfig


class HealthMonitor:
    def __init__(
        self,
        cfg: HealthConfig,
        event: Callable[..., None],
        say: Callable[[str], None] = print,
        rows: Iterable[dict[str, Any]] | None = None,
    ) -> None:
        self.cfg, self.event, self.say = cfg, event, say
        self.history = history_for(cfg)
        for row in rows or []:
            self.history.add(row)
        self.active: set[str] = set()
        self.first_reasons: dict[str, str] = {}  # alarm -> the reason it gave the first time it held

    def check(self, step: int, metrics: dict[str, Any]) -> dict[str, float]:
        """``alarm/<name>`` of this step; ``metrics`` joins the history (an eval-only row too, ``step`` 0)."""
        self.history.add({"step": step, **metrics})
        if not self.cfg.enabled:
            return {}
        out = {}
        for name, reason in check_all(self.history, self.cfg).items():
            out[f"alarm/{name}"] = float(reason is not None)
            if reason is None:
                self.active.discard(name)
            elif name not in self.active:
                self.active.add(name)
                self.first_reasons.setdefault(name, reason)
                self.event("alarm", alarm=name, step=step, reason=reason)
                self.say(f"ALARM step {step}: {name}: {reason}")
        return out
