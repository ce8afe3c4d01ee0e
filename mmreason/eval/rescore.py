"""`mmreason eval score`: saved answers (an API model's, a colleague's, a published run's) scored by a task's
metrics without a model, written as a model run writes its files.

    mmreason eval score --tasks mathvista:testmini.json --predictions output_gpt4.json --output_path eval_results

reads the task's docs as ``mmreason eval`` does (``--tasks PACK:PATH``, ``--task_args``, ``--limit``), the
answers as ``predictions.py`` reads them, and writes ``<output_path>/<name>/<timestamp>_results.json``,
``_results.md`` and ``_samples_<task>.jsonl`` (name: ``--model_name``, default the predictions file's stem), so
``eval compare`` and ``eval paired`` take it like any run. Every record's ``doc_id`` is the doc's id, which for
the published benchmarks is the benchmark's own (``pid``, ``id``, ``questionId``, ``question_id``).

A doc without a saved answer is a failed doc (``n_failed``, ``failed_ids``, "no prediction" in its record),
never a score of 0; answers whose id is no doc of the task are counted (``predictions_unmatched``) and named in
the header; a file none of whose ids is a doc is an error. ``--use_extraction`` scores each record's
``extraction`` field (MathVista's output files) in place of extracting again: it reaches the metrics as an
``<answer>`` body, which the benchmarks' extraction takes as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mmreason.eval.config import parse_kv
from mmreason.eval.output import RunFiles, config_hash, elapsed_since, package_versions
from mmreason.eval.predictions import Prediction, read_predictions
from mmreason.eval.report import build_results, markdown_table, print_table
from mmreason.eval.scoring import _jsonable, metric_scores
from mmreason.eval.tasks import EvalTask, load_tasks

if TYPE_CHECKING:
    from rich.console import Console


def _record(
    task: EvalTask, index: int, prediction: Prediction | None, use_extraction: bool, source: str
) -> dict[str, Any]:
    sample = task.samples[index]
    base = {"doc_id": sample.id, "doc_index": index, "target": _jsonable(sample.answer)}
    if prediction is None:
        return {**base, "error": f"no prediction for this doc in {source}"}
    if use_extraction and prediction.extraction is None:
        return {**base, "response": prediction.response, "error": f"--use_extraction: no extraction field in {source}"}
    text = f"<answer>{prediction.extraction}</answer>" if use_extraction else prediction.response
    scores, errors = metric_scores(task, sample, text)
    record = {**base, "response": prediction.response, "parsed_answer": task.extract_answer(text), "scores": scores}
    if prediction.extraction is not None:
        record["extraction"] = prediction.extraction
    if errors:
        record["metric_errors"] = errors
    return record


def score_predictions(
    task: EvalTask, predictions: dict[str, Prediction], use_extraction: bool, source: str
) -> tuple[list[dict[str, Any]], list[str]]:
    """(a record per doc in doc order, the ids of answers that match no doc)."""
    ids = {s.id for s in task.samples}
    unmatched = [k for k in predictions if k not in ids]
    if len(unmatched) == len(predictions):
        shown = ", ".join(map(repr, unmatched[:3])) + (", ..." if len(unmatched) > 3 else "")
        raise ValueError(
            f"{source}: none of its {len(predictions)} ids ({shown}) "
            f"is a doc of task {task.name!r} (doc ids like {', '.join(repr(s.id) for s in task.samples[:3])})"
        )
    records = [_record(task, i, predictions.get(s.id), use_extraction, source) for i, s in enumerate(task.samples)]
    return records, unmatched


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def rescore(
    tasks_spec: str,
    predictions_path: str,
    *,
    output_path: str = "eval_results",
    model_name: str | None = None,
    task_args: dict[str, Any] | None = None,
    limit: float | None = None,
    use_extraction: bool = False,
    console: Console | None = None,
) -> tuple[dict[str, Any], Path]:
    """Score ``predictions_path`` on the task of ``tasks_spec``; (results, results file)."""
    start = time.perf_counter()
    tasks = load_tasks(tasks_spec, limit, task_args)
    if len(tasks) != 1:
        raise ValueError("mmreason eval score: --tasks names one task (one predictions file scores one task)")
    task, path = tasks[0], Path(predictions_path)
    predictions = read_predictions(path)
    records, unmatched = score_predictions(task, predictions, use_extraction, str(path))
    if use_extraction:
        task.extraction_note = "scored the file's own extraction field (--use_extraction), not extracted again"
    if unmatched:
        task.notes.append(
            f"{len(unmatched)} predictions match no doc ({', '.join(map(repr, unmatched[:5]))}"
            + (", ..." if len(unmatched) > 5 else "")
            + ")"
        )
    config = {
        "model": {"predictions": str(path.resolve()), "sha256": _file_hash(path)},
        "tasks": [task.name],
        "task_args": task_args or {},
        "docs_hash": {task.name: task.docs_hash()},
        "limit": limit,
        "use_extraction": use_extraction,
        "predictions_unmatched": len(unmatched),
    }
    name = model_name or re.sub(r"[^\w.-]+", "_", path.stem) or "predictions"
    files = RunFiles.open(output_path, name, config)
    results = build_results(
        tasks,
        {task.file_name: records},
        config,
        model_name=name,
        stamp=files.stamp,
        digest=config_hash(config),
        versions=package_versions(),
        seconds=elapsed_since(start),
    )
    results["results"][task.name]["predictions_unmatched"] = len(unmatched)
    files.finish(results, markdown_table(results), {task.file_name: records}, log_samples=True)
    if console is not None:
        print_table(results, console)
        console.print(f"results: {files.results_path}", soft_wrap=True)
    return results, files.results_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tasks", required=True, help="one task, PACK or PACK:PATH, as for mmreason eval")
    parser.add_argument(
        "--predictions",
        required=True,
        help="the saved answers: JSON / JSONL of {id: response} or "
        "records, an lmms-eval samples file, or the benchmark's own output file",
    )
    parser.add_argument("--output_path", default="eval_results", help="results go to OUTPUT_PATH/<model_name>/")
    parser.add_argument("--model_name", default=None, help="the run's name (default: the predictions file's stem)")
    parser.add_argument("--task_args", default="", help="options for the pack's loader, e.g. image_dir=PATH")
    parser.add_argument("--limit", type=float, default=None, help="first N docs (< 1: a fraction)")
    parser.add_argument(
        "--use_extraction",
        action="store_true",
        help="score each record's extraction field instead of extracting from its response",
    )


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    rescore(
        args.tasks,
        args.predictions,
        output_path=args.output_path,
        model_name=args.model_name,
        task_args=parse_kv(args.task_args, "--task_args"),
        limit=args.limit,
        use_extraction=args.use_extraction,
        console=Console(),
    )
    return 0
