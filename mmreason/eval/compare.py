"""`mmreason eval compare A_results.json B_results.json ...`: metric deltas and a PNG bar chart.

The first file is the baseline. For each (task, metric) present in the baseline, every other run's
delta is ``value_i - value_0`` with the standard error of a difference of two independent means,
``sqrt(se_0^2 + se_i^2)``; runs over the same docs are positively correlated, so this is conservative.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmreason.files import MAX_TEXT_BYTES, parse_json, read_text

if TYPE_CHECKING:
    from rich.console import Console


@dataclass
class Row:
    task: str
    metric: str
    values: list[float | None]  # one per results file
    stderrs: list[float | None]

    def delta(self, i: int) -> tuple[float | None, float | None]:
        a, b = self.values[0], self.values[i]
        if a is None or b is None:
            return None, None
        sa, sb = self.stderrs[0], self.stderrs[i]
        se = math.sqrt(sa**2 + sb**2) if sa is not None and sb is not None else None
        return b - a, se


def load_results(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    label = f"results file {str(p)!r}"
    data = parse_json(read_text(p, "results file", MAX_TEXT_BYTES), label)  # a regular file, bounded
    if not isinstance(data, dict) or "results" not in data:
        raise ValueError(f"{str(p)!r} is not an `mmreason eval` results file (no 'results' key)")
    return data


def labels_for(runs: list[dict[str, Any]], paths: list[str]) -> list[str]:
    labels = [f"{r.get('model_name', Path(p).parent.name)} {r.get('date', '')}".strip() for r, p in zip(runs, paths)]
    return [f"{i}: {label}" for i, label in enumerate(labels)] if len(set(labels)) < len(labels) else labels


def compare_rows(runs: list[dict[str, Any]]) -> list[Row]:
    """(task, metric) rows of the baseline (the first run), with every run's value and stderr."""
    rows = []
    for task, base in runs[0]["results"].items():
        metrics = list(runs[0].get("higher_is_better", {}).get(task, {})) or [
            k.removesuffix(",none") for k in base if k.endswith(",none") and not k.endswith(("_stderr,none", "_n,none"))
        ]
        for metric in metrics:
            values, stderrs = [], []
            for run in runs:
                res = run["results"].get(task, {})
                values.append(res.get(f"{metric},none"))
                stderrs.append(res.get(f"{metric}_stderr,none"))
            rows.append(Row(task, metric, values, stderrs))
    return rows


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "N/A"
    return f"{value:+.4f}" if signed else f"{value:.4f}"


def print_comparison(rows: list[Row], labels: list[str], console: Console | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="eval compare (deltas against the first run)")
    table.add_column("Task")
    table.add_column("Metric")
    for i, label in enumerate(labels):
        table.add_column(label, justify="right")
        if i:
            table.add_column(f"Δ {i}", justify="right")
    for row in rows:
        cells = [row.task, row.metric, _fmt(row.values[0])]
        for i in range(1, len(labels)):
            d, se = row.delta(i)
            cells += [_fmt(row.values[i]), _fmt(d, signed=True) + (f" ± {se:.4f}" if se is not None else "")]
        table.add_row(*cells)
    (console or Console()).print(table)


def write_chart(rows: list[Row], labels: list[str], out: str | Path) -> Path:
    """Grouped bars: one group per (task, metric), one bar per run, stderr as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_runs, width = len(labels), 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(rows) * n_runs), 4.5))
    for i, label in enumerate(labels):
        xs = [g + (i - (n_runs - 1) / 2) * width for g in range(len(rows))]
        ys = [r.values[i] or 0.0 for r in rows]
        errs = [r.stderrs[i] or 0.0 for r in rows]
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=label.lstrip("_"))  # "_x" would hide from the legend
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r.task}\n{r.metric}" for r in rows], fontsize=8)
    ax.set_ylabel("score (± stderr)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "results", nargs="+", help="two or more <timestamp>_results.json files; the first is the baseline"
    )
    parser.add_argument("--output", default="eval_compare.png", help="where to write the PNG bar chart")


def run(args: argparse.Namespace) -> int:
    if len(args.results) < 2:
        raise ValueError("eval compare needs at least two results files")
    runs = [load_results(p) for p in args.results]
    rows = compare_rows(runs)
    labels = labels_for(runs, args.results)
    print_comparison(rows, labels)
    print(f"chart: {write_chart(rows, labels, args.output)}")
    return 0
