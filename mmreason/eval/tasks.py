"""``--tasks``: registered task packs, or ``PACK:PATH`` for a pack's prompt and metrics on the user's data.

A task pack defines its eval split, prompt and metrics once; training and the harness share them.
``--tasks shapes`` evaluates the pack's own eval split; ``--tasks shapes:my.jsonl`` loads ``my.jsonl``
(JSONL or parquet in the pack's data shape) through the same loader, so no code is written.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mmreason.eval.config import EVAL_SPLIT, parse_task_specs, resolve_limit
from mmreason.parsing import final_answer
from mmreason.registry import first_doc_line
from mmreason.rollout.env_plugin import attach_environment
from mmreason.taskpack import TASKS, TaskPack
from mmreason.types import Sample


@dataclass
class EvalTask:
    """One task of a run: its pack, where its docs came from, and the docs (after ``--limit``)."""

    name: str  # "shapes" or "shapes:mydata"
    pack: TaskPack
    path: str | None
    samples: list[Sample]
    n_original: int  # docs before --limit
    extract_answer: Callable[[str], str] = field(repr=False)  # response -> parsed answer (for the logs)
    extractor_name: str
    skipped_rows: dict[str, int] = field(default_factory=dict)  # reason -> rows the loader skipped
    # the pack's breakdowns over these docs (``TaskPack.breakdowns``: accuracy per category, subject, ...)
    breakdown_metrics: dict[str, Callable[[Sample, str], float]] = field(default_factory=dict, repr=False)
    notes: list[str] = field(default_factory=list)  # lines for the results header (the loader's, the run's)
    extraction_note: str = ""  # how answers are taken from responses, when the loader says (results header)
    partial_rows: dict[str, int] = field(default_factory=dict)  # reason -> rows kept, left out of some metrics

    @property
    def metrics(self) -> dict[str, Callable[[Sample, str], float]]:
        """The per-doc metrics: the pack's, then its breakdowns over these docs."""
        return {**self.pack.metrics, **self.breakdown_metrics}

    @property
    def metric_names(self) -> list[str]:
        """The per-doc metrics, then the pack's derived ones (the order of the results table)."""
        return [*self.metrics, *self.pack.derived]

    @property
    def file_name(self) -> str:
        """The task's name as it appears in ``<timestamp>_samples_<task>.jsonl``."""
        return re.sub(r"[^\w.-]+", "_", self.name)

    def docs_hash(self) -> str:
        """Fingerprint of the docs (ids and answers): a changed data file never reuses stale samples."""
        rows = [[s.id, s.answer] for s in self.samples]
        return hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        """Everything about the task that moves its scores, for the results file."""
        return {
            "task": self.name,
            "pack": self.pack.name,
            "data": self.path or f"built-in {EVAL_SPLIT} split",
            "split": EVAL_SPLIT,
            "prompt_template": self.pack.prompt_template,
            "metrics": {
                name: {
                    "function": _qualname(fn),
                    "doc": first_doc_line(fn),
                    "aggregation": "mean",
                    "higher_is_better": self.pack.metric_higher_is_better(name),
                }
                for name, fn in self.metrics.items()
            },
            "answer_extractor": self.extractor_name,
            "n_docs": len(self.samples),
            "docs_hash": self.docs_hash(),
            **(
                {
                    "derived_metrics": {
                        name: {"function": _qualname(fn), "doc": first_doc_line(fn)}
                        for name, fn in self.pack.derived.items()
                    }
                }
                if self.pack.derived
                else {}
            ),
            **(
                {"note": "; ".join(n for n in [self.pack.results_note, self.extraction_note, *self.notes] if n)}
                if self.pack.results_note or self.extraction_note or self.notes
                else {}
            ),
            **({"skipped_rows": self.skipped_rows} if self.skipped_rows else {}),
            **({"partial_rows": self.partial_rows} if self.partial_rows else {}),
            **({"page_allocation": self.page_allocation} if self.page_allocation else {}),
        }

    @property
    def page_allocation(self) -> dict[str, Any] | None:
        """How a document pack budgeted its pages' resolution (``meta["page_allocation"]``, e.g. DocSeeker's
        uniform fit or its gold-page validation); ``gold: true`` means the resolution shows the evidence."""
        return next((s.meta["page_allocation"] for s in self.samples if s.meta.get("page_allocation")), None)


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def default_extractor() -> tuple[Callable[[str], str], str]:
    """The answer shown as ``parsed_answer``: the shared final-answer parser (metrics parse on their own)."""

    return final_answer, "mmreason.parsing.final_answer(mode=auto)"


def load_task(
    pack_name: str,
    path: str | None,
    limit: float | None = None,
    options: dict[str, Any] | None = None,
    seed: int = 0,
    *,
    max_prompt_length: int | None = None,
    tokenizer: Any = None,
    options_key: str = "--task_args",
    environment: Any = None,
    max_turns: int | None = None,
) -> EvalTask:
    """A pack's eval docs (``options`` go to its loader), the first ``limit`` of them, each passed
    through the pack's per-draw ``prepare`` (e.g. page resolution allocation) once, at step 0.

    A loader with a ``max_prompt_length`` parameter (DocSeeker fits its page budgets to it) gets the
    run's, unless ``options`` set it, and one with a ``tokenizer`` parameter the model's (to count text)."""
    import inspect

    pack = TASKS.get(pack_name)
    if environment is not None:  # --environment: the user's environment on this pack, its tools in the prompts
        pack = attach_environment(pack, environment, max_turns)
    if path is not None and not Path(path).exists() and not any(c in path for c in "*?["):  # a glob: the loader's
        raise FileNotFoundError(f"--tasks {pack_name}:{path}: data file {path!r} does not exist")
    options = dict(options or {})
    accepts = inspect.signature(pack.load).parameters
    group_by = options.pop("group_by", None) if "group_by" not in accepts else None
    if max_prompt_length is not None and "max_prompt_length" in accepts:
        options.setdefault("max_prompt_length", max_prompt_length)
    if tokenizer is not None and "tokenizer" in accepts:
        options.setdefault("tokenizer", tokenizer)
    samples = pack.load_split(path, EVAL_SPLIT, options, key=options_key)
    if not samples:
        raise ValueError(f"task {pack_name!r}: the {EVAL_SPLIT} split is empty ({path or 'built-in data'})")
    counts = Counter(s.id for s in samples)
    if len(counts) != len(samples):
        dup = next(i for i, c in counts.items() if c > 1)
        raise ValueError(f"task {pack_name!r}: doc id {dup!r} occurs twice in {path or 'the built-in data'}")
    if not pack.metrics:
        raise ValueError(f"task pack {pack_name!r} defines no metrics to evaluate")
    name = pack_name if path is None else f"{pack_name}:{Path(path).stem}"
    extract = pack.extract_answer
    extractor = (extract, _qualname(extract)) if extract is not None else default_extractor()
    skipped = dict(getattr(samples, "skipped", None) or {})  # a loader may say which rows it left out
    partial = dict(getattr(samples, "partial", None) or {})  # ... and which it kept out of some metrics
    notes = list(getattr(samples, "notes", None) or [])  # and what it noticed (e.g. subtitles found)
    extraction = str(getattr(samples, "extraction", "") or "")  # and how answers are extracted
    kept = [pack.prepare(s, split=EVAL_SPLIT, seed=seed, step=0) for s in samples[: resolve_limit(limit, len(samples))]]
    breakdowns = pack.breakdowns(kept) if pack.breakdowns is not None else {}
    if group_by is not None:
        breakdowns.update(group_by_metrics(pack, kept, str(group_by)))
    return EvalTask(
        name,
        pack,
        path,
        kept,
        len(samples),
        extractor[0],
        extractor[1],
        skipped,
        breakdowns,
        notes,
        extraction,
        partial,
    )


MAX_GROUPS = 100  # a group_by column with more values is not categorical


def group_by_metrics(pack: TaskPack, samples: list[Sample], column: str) -> dict[str, Callable[[Sample, str], float]]:
    """Every metric of ``pack`` broken down by the samples' ``column`` (``--task_args group_by=COLUMN``):
    ``METRIC/COLUMN=VALUE``, the metric on that group's docs only (NaN elsewhere, so its mean is the group's)."""
    groups = sorted({v for v in (group_value(s, column) for s in samples) if v is not None})
    if len(groups) > MAX_GROUPS:
        raise ValueError(
            f"--task_args group_by={column}: {len(groups)} distinct values (over {MAX_GROUPS}); "
            "give a categorical column"
        )
    return {
        f"{name}/{column}={group}": _in_group(fn, column, group)
        for name, fn in pack.metrics.items()
        for group in groups
    }


def group_value(sample: Sample, column: str) -> str | None:
    value = sample.meta.get(column)
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def _in_group(fn: Callable[[Sample, str], float], column: str, group: str) -> Callable[[Sample, str], float]:
    def metric(sample: Sample, completion: str) -> float:
        return fn(sample, completion) if group_value(sample, column) == group else math.nan

    metric.__doc__ = f"{first_doc_line(fn)} (docs whose {column} is {group!r})"
    metric.__qualname__ = f"{getattr(fn, '__qualname__', 'metric')}[{column}={group}]"
    metric.__module__ = getattr(fn, "__module__", "?")
    return metric


def load_tasks(
    text: str | list[str],
    limit: float | None = None,
    options: dict[str, Any] | None = None,
    seed: int = 0,
    max_prompt_length: int | None = None,
    *,
    tokenizer: Any = None,
    environment: Any = None,
    max_turns: int | None = None,
) -> list[EvalTask]:
    """The tasks of ``text``; ``environment`` (an ``EnvironmentFactory``, ``--environment``) is attached to each
    pack, its episodes ``max_turns`` long (default: the environment's own)."""
    tasks = [
        load_task(
            name,
            path,
            limit,
            options,
            seed,
            max_prompt_length=max_prompt_length,
            tokenizer=tokenizer,
            environment=environment,
            max_turns=max_turns,
        )
        for name, path in parse_task_specs(text)
    ]
    column = (options or {}).get("group_by")
    if column is not None and not any(f"/{column}=" in m for t in tasks for m in t.metrics):
        raise ValueError(
            f"--task_args group_by={column}: no doc of {', '.join(t.name for t in tasks)} has a {column!r} column"
        )
    names = [t.file_name for t in tasks]
    for n in names:
        if names.count(n) > 1:
            raise ValueError(f"--tasks: two tasks are both named {n!r}; rename one data file")
    return tasks
