"""The results record of a run and its table (terminal and markdown), in lmms-eval's key names.

``results[task]`` holds, per metric ``m``: ``"m,none"`` (the mean), ``"m_stderr,none"`` and ``"m_n,none"``
(docs with a score), plus ``n`` (docs scored), ``n_failed`` and ``failed_ids`` (docs whose media or
prompt could not be built, with the reason in the samples file). ``,none`` is lmms-eval's filter name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

from mmreason.eval.metrics import aggregate
from mmreason.eval.tasks import EvalTask


def task_results(task: EvalTask, records: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"alias": task.name}
    summaries = aggregate(records, list(task.metrics))
    for name, summary in summaries.items():
        out[f"{name},none"] = summary.value
        out[f"{name}_stderr,none"] = summary.stderr
        out[f"{name}_n,none"] = summary.n
    means = {name: s.value for name, s in summaries.items()}
    for name, fn in task.pack.derived.items():  # set-level scores from the means: no per-doc stderr
        out[f"{name},none"] = fn(means)
        out[f"{name}_stderr,none"] = None
        out[f"{name}_n,none"] = max((s.n for s in summaries.values()), default=0)
    failed = [r for r in records if "error" in r]
    out["n"] = len(records) - len(failed)
    out["n_failed"] = len(failed)
    out["failed_ids"] = [r["doc_id"] for r in failed]
    metric_failures = [r for r in records if r.get("metric_errors")]
    out["n_metric_failed"] = len(metric_failures)  # docs where a metric raised (scored without that metric)
    return out


def build_results(
    tasks: list[EvalTask],
    records: dict[str, list[dict[str, Any]]],
    config: dict[str, Any],
    *,
    model_name: str,
    stamp: str,
    digest: str,
    versions: dict[str, Any],
    seconds: float | None = None,
) -> dict[str, Any]:
    return {
        "results": {t.name: task_results(t, records[t.file_name]) for t in tasks},
        "configs": {t.name: t.describe() for t in tasks},
        "higher_is_better": {t.name: {m: t.pack.metric_higher_is_better(m) for m in t.metric_names} for t in tasks},
        "n-samples": {t.name: {"original": t.n_original, "effective": len(t.samples)} for t in tasks},
        "config": config,
        "config_hash": digest,
        "model_name": model_name,
        "date": stamp,
        "versions": versions,
        "total_evaluation_time_seconds": seconds,
    }


# ---- tables ------------------------------------------------------------------------------------

HEADER = ("Task", "Metric", "", "Value", "", "Stderr", "n", "Failed")


def _fmt(value: float | None) -> str:
    return "N/A" if value is None else f"{value:.4f}"


def table_rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for task, res in results["results"].items():
        for metric, higher in results["higher_is_better"][task].items():
            rows.append(
                (
                    task,
                    metric,
                    "↑" if higher else "↓",
                    _fmt(res[f"{metric},none"]),
                    "±",
                    _fmt(res[f"{metric}_stderr,none"]),
                    str(res[f"{metric}_n,none"]),
                    str(res["n_failed"]),
                )
            )
    return rows


def markdown_table(results: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in table_rows(results)]
    failed = {t: r["failed_ids"] for t, r in results["results"].items() if r["failed_ids"]}
    notes = [
        f"- `{t}`: {len(ids)} failed docs: {', '.join(map(str, ids[:20]))}" + (" ..." if len(ids) > 20 else "")
        for t, ids in failed.items()
    ]
    title = f"# {results['model_name']} ({results['date']})\n\n"
    title += "".join(f"> {line}\n\n" for line in allocation_warnings(results))
    return title + "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "") + "\n"


def allocation_warnings(results: dict[str, Any]) -> list[str]:
    """A line per task whose pages were budgeted from the gold evidence (DocSeeker's ``egra_eval=gold``),
    and each task's own note (``TaskPack.results_note``) and count of data rows its loader skipped."""
    out = []
    for task, cfg in results.get("configs", {}).items():
        if cfg.get("note"):
            out.append(f"`{task}`: {cfg['note']}.")
        if cfg.get("skipped_rows"):
            skipped = cfg["skipped_rows"]
            out.append(
                f"`{task}`: {sum(skipped.values())} data rows skipped ("
                + ", ".join(f"{reason}: {n}" for reason, n in skipped.items())
                + ")."
            )
        for reason, n in (cfg.get("partial_rows") or {}).items():
            out.append(f"`{task}`: {n} data rows with {reason}.")
        alloc = cfg.get("page_allocation") or {}
        if alloc.get("gold"):
            out.append(
                f"`{task}`: page allocation `{alloc.get('mode')}`: the gold evidence pages get the high "
                f"resolution budget ({alloc.get('high_tokens')} vs {alloc.get('low_tokens')} tokens), so "
                "the input shows where the evidence is; not comparable with the default uniform allocation."
            )
    return out


def print_table(results: dict[str, Any], console: Console | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{results['model_name']} ({results['date']})", caption="\n".join(allocation_warnings(results)) or None
    )
    for i, name in enumerate(HEADER):
        table.add_column(name, justify="right" if i >= 3 else "left")
    for row in table_rows(results):
        table.add_row(*row)
    (console or Console()).print(table)
