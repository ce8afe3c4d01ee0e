"""Task packs: a folder under tasks/ (shipped as ``mmreason.tasks``) that registers a ``TaskPack``.

A pack owns its data (loader and synthetic generator), its prompt, its default rewards and weights,
its eval metrics and, for multi-turn tasks, its environment. The engine only sees this record.
Third-party packs register through the ``mmreason.tasks`` entry-point group or a module imported
from a config (``task: my_pkg.my_pack:PACK``).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

import mmreason.tasks as packs
from mmreason.registry import Registry
from mmreason.types import Sample


@dataclass
class TaskPack:
    """What the trainer and the evaluation harness need from a task.

    load:     (path, split, **options) -> list[Sample]; ``path`` is a JSONL/parquet file or folder in
              the pack's data shape, or None for the pack's bundled/synthetic data.
    rewards:  default reward specs as config mappings ({"name": ..., "weight": ..., **kwargs}).
    metrics:  eval metric name -> fn(sample, completion_text) -> float (mean-aggregated).
    derived:  metric name -> fn(means) -> float | None, computed from the other metrics' means after
              aggregation (a set-level score such as an F1 of a mean precision and a mean recall).
    results_note: a line the results header shows (e.g. how answers are extracted).
    breakdowns: the loaded eval docs -> more metrics, one per group the docs hold (a published benchmark's
              accuracy by category, subject, duration, ...: groups known only once the file is read).
    baseline: train samples -> rule; ``rule(sample) -> completion_text`` answers without the sample's media,
              scored with ``metrics`` by ``mmreason eval baseline --task PACK``.
    """

    name: str
    description: str
    load: Callable[..., list[Sample]]
    rewards: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Callable[[Sample, str], float]] = field(default_factory=dict)
    derived: dict[str, Callable[[dict[str, float | None]], float | None]] = field(default_factory=dict)
    results_note: str = ""
    breakdowns: Callable[[list[Sample]], dict[str, Callable[[Sample, str], float]]] | None = None
    make_environment: Callable[..., Any] | None = None
    max_turns: int = 1  # assistant turns of an eval episode in the environment (1 = single-turn generation)
    prompt_template: str = ""
    sft_target: Callable[[Sample], str] | None = None  # assistant text to imitate; default: the answer
    higher_is_better: dict[str, bool] = field(default_factory=dict)  # metric -> direction (default True)
    extract_answer: Callable[[str], str] | None = None  # completion -> parsed answer in eval logs
    # Called every time a sample is drawn, with split "train" (RL), "sft" or "eval" and a generator
    # seeded by (run seed, step, sample id): per-draw choices such as resolution allocation.
    transform: Callable[..., Sample] | None = None  # (sample, *, split: str, rng: random.Random) -> Sample
    # The sample column that names a trajectory's task for per-task metrics and task-aware estimators
    # (G²RPO's sets); None = the sample's ``task``. A config's ``algorithm.task_key`` overrides it.
    task_key: str | None = None
    baseline: Callable[[list[Sample]], Callable[[Sample], str]] | None = None

    @property
    def metric_names(self) -> list[str]:
        """The per-doc metrics, then the derived ones (the order of the results table)."""
        return [*self.metrics, *self.derived]

    def metric_higher_is_better(self, metric: str) -> bool:
        return self.higher_is_better.get(metric, True)

    def load_split(
        self, path: str | None, split: str, options: dict[str, Any] | None = None, *, key: str = "data.task_args"
    ) -> list[Sample]:
        """``load(path, split, **options)`` once every option is one the loader takes (``check_options``)."""
        return self.load(path, split, **self.check_options(options or {}, key=key))

    def check_options(self, options: dict[str, Any], *, key: str = "data.task_args") -> dict[str, Any]:
        """``options`` for the loader, or a one-line ``ValueError`` naming ``key``, the option and the loader's
        options: a key the loader does not take (``__init__``, a typo, ``path`` / ``split``) would otherwise be a
        ``TypeError`` traceback from inside the call."""
        takes = loader_options(self.load)
        open_ended = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(self.load).parameters.values())
        for name in options:
            if not isinstance(name, str) or not (name in takes or (open_ended and name not in ("path", "split"))):
                raise ValueError(
                    f"{key}: {name!r} is not an option of the {self.name!r} task's loader "
                    f"({getattr(self.load, '__name__', 'load')}); it takes: {', '.join(takes) or 'none'}"
                )
        return dict(options)

    def prepare(self, sample: Sample, *, split: str, seed: int, step: int) -> Sample:
        """The sample as the model will see it on this draw (the pack's ``transform``, seeded)."""
        if self.transform is None:
            return sample
        rng = random.Random(f"{seed}/{step}/{split}/{sample.id}")
        return self.transform(sample, split=split, rng=rng)

    def target_text(self, sample: Sample) -> str:
        if self.sft_target is not None:
            return self.sft_target(sample)
        return str(sample.meta.get("target", sample.answer))

    def __post_init__(self) -> None:
        self.__doc__ = self.description  # what Registry.describe prints for the pack


def loader_options(load: Callable[..., Any]) -> list[str]:
    """The options a pack loader takes by name: its parameters after ``path`` and ``split``."""
    params = [
        p for p in inspect.signature(load).parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD][:2]  # path, split
    return [p.name for p in params if p not in positional]


def _load_packs() -> None:
    for info in pkgutil.iter_modules(packs.__path__, packs.__name__ + "."):
        importlib.import_module(info.name)
    for ep in entry_points(group="mmreason.tasks"):
        ep.load()


TASKS: Registry[TaskPack] = Registry("task", loader=_load_packs, item_type=TaskPack)


def register_task(pack: TaskPack) -> TaskPack:
    TASKS.add(pack.name, pack)
    return pack
