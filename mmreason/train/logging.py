"""Run logs: a progress bar, ``metrics.jsonl`` (one line per step), ``completions.jsonl`` (sampled
completions with their rewards every N steps), ``events.log`` (skipped samples, reward errors, NaN steps),
and tensorboard / wandb through accelerate's trackers when installed and asked for.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tqdm.auto import tqdm

from mmreason.paths import read_jsonl, seal_jsonl

if TYPE_CHECKING:
    from accelerate import Accelerator

APPENDED = ("metrics.jsonl", "completions.jsonl", "events.log", "unseen_media.jsonl")  # JSON Lines a run appends to
# one row (or group of rows) per step: what replay would repeat
STEP_LOGS = ("metrics.jsonl", "completions.jsonl")


def _clean(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class RunLogger:
    def __init__(
        self,
        output_dir: str | Path,
        accelerator: Accelerator,
        total_steps: int,
        start_step: int = 0,
        report_to: list[str] | None = None,
        *,
        config: dict | None = None,
    ) -> None:
        self.dir = Path(output_dir)
        self.main = accelerator.is_main_process
        self.accelerator = accelerator
        self.trackers = bool(report_to)
        self.bar = None
        if self.main:
            self.dir.mkdir(parents=True, exist_ok=True)
            # a line a kill cut short is never glued to the next run's first row
            for name in APPENDED:
                seal_jsonl(self.dir / name)
            # the steps a resumed run replays are logged once, by the replay
            for name in STEP_LOGS:
                drop_steps_after(self.dir / name, start_step)

            self.bar = tqdm(total=total_steps, initial=start_step, desc="train", dynamic_ncols=True)
        if self.trackers:
            accelerator.init_trackers("mmreason", config=_flat(config or {}))

    def event(self, kind: str, /, **fields: Any) -> None:
        """Log a fault or notable event as one JSON line (every process appends its own)."""
        line = {
            "time": time.time(),
            "rank": self.accelerator.process_index,
            "event": kind,
            **{("detail_kind" if k == "kind" else k): v for k, v in fields.items()},
        }
        with (self.dir / "events.log").open("a") as f:
            f.write(json.dumps(line, default=str) + "\n")

    def say(self, line: str) -> None:
        """Say a line above the progress bar (alarms), main process only."""
        if not self.main:
            return
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def step(self, step: int, metrics: dict[str, Any], advance: bool = True) -> None:
        """Log one metrics row; ``advance=False`` for a row that is not a training step (the eval before step 1)."""
        if not self.main:
            return
        row = {"step": step, **{k: _clean(v) for k, v in metrics.items()}}
        with (self.dir / "metrics.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.trackers:
            self.accelerator.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)
        if self.bar is not None and advance:
            self.bar.update(1)
            shown = {"reward": row.get("reward/mean"), "loss": row.get("loss"), "kl": row.get("kl")}
            postfix = {k: f"{v:.4f}" for k, v in shown.items() if isinstance(v, (int, float))}
            postfix["s"] = f"{row.get('time/step') or 0.0:.1f}"
            self.bar.set_postfix(postfix)

    def completions(self, step: int, rows: list[dict[str, Any]]) -> None:
        if not self.main or not rows:
            return
        with (self.dir / "completions.jsonl").open("a") as f:
            for row in rows:
                f.write(json.dumps({"step": step, **row}, default=str) + "\n")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.trackers:
            self.accelerator.end_training()


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float, str, bool)) or v is None:
            out[f"{prefix}{k}"] = v
        else:
            out[f"{prefix}{k}"] = str(v)
    return out


def drop_steps_after(path: Path, start: int) -> int:
    """Remove the rows of ``path`` logged for steps after ``start`` (a run resumed from checkpoint ``start``
    replays them: killed after logging a step, before saving it), and for step 0 too when ``start`` is 0 (the
    eval before step 1 is run again). The file is rewritten whole (atomically) only when a row goes; the rows
    kept are byte for byte as they were. Returns how many rows were dropped. (``events.log`` and
    ``unseen_media.jsonl`` keep everything: they say what happened, replayed or not.)"""
    if not path.is_file():
        return 0
    lines = path.read_bytes().split(b"\n")
    kept = [raw for raw in lines if raw.strip() and not _replayed(raw, start)]
    dropped = sum(1 for raw in lines if raw.strip()) - len(kept)
    if dropped:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(b"".join(raw + b"\n" for raw in kept))
        tmp.replace(path)
    return dropped


def _replayed(raw: bytes, start: int) -> bool:
    try:
        step = json.loads(raw).get("step")
    except (ValueError, AttributeError, RecursionError):  # a broken line is left to the readers, who skip it
        return False
    if isinstance(step, bool) or not isinstance(step, int):
        return False
    return step > start or (start == 0 and step == 0)


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Read the rows of ``metrics.jsonl`` (a line cut short by a kill dropped with a warning: ``paths.read_jsonl``)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{str(path)!r} does not exist: is {str(run_dir)!r} a run directory?")
    return list(read_jsonl(path))
