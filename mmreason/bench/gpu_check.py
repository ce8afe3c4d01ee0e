"""The table of `scripts/gpu_check.sh` and the key figure of each of its checks.

The script runs each check under its own ``timeout`` and appends ``name<TAB>exit status<TAB>seconds`` to
``DIR/results.tsv``; a check may write its key figure (one line) to ``DIR/NAME.figure`` and its output goes to
``DIR/NAME.log``. ``python -m mmreason.bench.gpu_check table DIR`` prints one Markdown table (check, status, time,
key figure) and exits 1 when any check failed. The other commands read a check's key figure from what it wrote
and exit 1 when it misses its bar (``accuracy``: the held-out accuracy of a run; ``steps``: the steps a run
logged and their losses; ``bench``: the ``mmreason bench grpo-shape --json`` figures).

Exit status of a check: 0 pass; 77 skip (the automake convention; the figure says why); 124 or 137 fail, timed
out (``timeout`` and its ``--kill-after``); anything else fail. A failed check without a figure shows the last
error line of its log. Imports no torch: the table prints in a second even where torch cannot load.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

SKIP = 77
TIMED_OUT = (124, 137)
MAX_FIGURE = 110  # characters of a key figure in the table


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # pass | fail | skip
    seconds: float
    figure: str


def status_of(code: int) -> str:
    """pass, skip or fail from a check's exit status."""
    return "pass" if code == 0 else "skip" if code == SKIP else "fail"


def last_error_line(log: str) -> str:
    """The line of a failed check's output that says why: the last one naming an error, else the last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line or "error:" in line.lower() or "Traceback" in line or "FAILED" in line:
            return line
    return lines[-1] if lines else ""


def _clip(text: str) -> str:
    text = " ".join(text.replace("|", "/").split())
    return text if len(text) <= MAX_FIGURE else text[: MAX_FIGURE - 3] + "..."


def read_results(folder: str | Path) -> list[CheckResult]:
    """The checks of ``folder/results.tsv`` in the order they ran, each with its figure."""
    folder = Path(folder)
    path = folder / "results.tsv"
    results = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise ValueError(f"{path}: line {n}: expected name<TAB>exit status<TAB>seconds, got {line!r}")
        name, code, seconds = parts[0], int(parts[1]), float(parts[2])
        fig_path, log_path = folder / f"{name}.figure", folder / f"{name}.log"
        figure = fig_path.read_text().strip() if fig_path.exists() else ""
        status = status_of(code)
        if code in TIMED_OUT:
            figure = f"timed out after {seconds:.0f} s" + (f"; {figure}" if figure else "")
        elif status == "fail" and not figure and log_path.exists():
            figure = last_error_line(log_path.read_text(errors="replace"))
        results.append(CheckResult(name, status, seconds, _clip(figure)))
    return results


def render(results: list[CheckResult]) -> str:
    """One Markdown table: a row per check and a total row (failures, time)."""
    rows = ["| check | status | time | key figure |", "|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r.name} | {r.status} | {r.seconds:.0f} s | {r.figure} |")
    failed = sum(r.status == "fail" for r in results)
    passed = sum(r.status == "pass" for r in results)
    skipped = sum(r.status == "skip" for r in results)
    total = sum(r.seconds for r in results)
    rows.append(f"| total | {failed} failed | {total:.0f} s | {passed} passed, {skipped} skipped |")
    return "\n".join(rows)


def exit_code(results: list[CheckResult]) -> int:
    """1 when any check failed (or none ran), else 0."""
    return 1 if not results or any(r.status == "fail" for r in results) else 0


def _metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics (the run did not start or wrote none)")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def heldout_accuracy(run_dir: str | Path) -> tuple[str, int, float]:
    """(key, step, value) of the last held-out accuracy (``eval/<task>/accuracy``) a run logged."""
    found = None
    for row in _metrics(run_dir):
        for key, value in row.items():
            if key.startswith("eval/") and key.endswith("/accuracy") and isinstance(value, (int, float)):
                found = (key, int(row.get("step", -1)), float(value))
    if found is None:
        raise ValueError(f"{Path(run_dir) / 'metrics.jsonl'}: no eval/<task>/accuracy row")
    return found


def accuracy_figure(run_dir: str, minimum: float) -> tuple[str, bool]:
    key, step, value = heldout_accuracy(run_dir)
    bar = f" (bar {minimum:.2f})" if minimum > 0 else ""
    return f"held-out {key.split('/')[1]} accuracy {value:.2f} at step {step}{bar}", value >= minimum


def steps_figure(run_dir: str, expected: int) -> tuple[str, bool]:
    rows = [r for r in _metrics(run_dir) if "loss" in r]
    losses = [float(r["loss"]) for r in rows]
    ok = len(rows) >= expected and all(math.isfinite(x) for x in losses)
    return f"{len(rows)} of {expected} steps, loss {', '.join(f'{x:.4g}' for x in losses) or 'none'}", ok


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e8 else f"{n / 1e6:.2f} M"


def bench_figure(path: str) -> tuple[str, bool]:
    r = json.loads(Path(path).read_text())
    peak = f"{r['peak_memory_gib']:.1f} GiB" if r.get("peak_memory_gib") is not None else "n/a (CPU)"
    text = (
        f"{_count(r['parameters'])} params: step {r['step_s_median']:.2f} s, "
        f"{r['generate_tokens_per_s']:,.0f} generated tok/s, {r['update_tokens_per_s']:,.0f} update tok/s, "
        f"peak {peak}"
    )
    steps = r["steps"]
    finite = all(math.isfinite(s["loss"]) and math.isfinite(s["grad_norm"]) for s in steps)
    return text, bool(steps) and finite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmreason.bench.gpu_check", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("table", help="print the table of DIR/results.tsv").add_argument("dir")
    acc = sub.add_parser("accuracy", help="the last held-out accuracy of a run")
    acc.add_argument("run_dir")
    acc.add_argument("--min", type=float, default=0.0, help="fail below this accuracy")
    steps = sub.add_parser("steps", help="the steps a run logged and their losses")
    steps.add_argument("run_dir")
    steps.add_argument("--expect", type=int, required=True)
    sub.add_parser("bench", help="the figures of mmreason bench grpo-shape --json").add_argument("json")
    args = parser.parse_args(argv)
    if args.cmd == "table":
        results = read_results(args.dir)
        print(render(results))
        return exit_code(results)
    try:
        if args.cmd == "accuracy":
            text, ok = accuracy_figure(args.run_dir, args.min)
        elif args.cmd == "steps":
            text, ok = steps_figure(args.run_dir, args.expect)
        else:
            text, ok = bench_figure(args.json)
    except (OSError, ValueError, KeyError) as exc:
        print(f"gpu_check {args.cmd}: {exc}", file=sys.stderr)
        return 1
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
