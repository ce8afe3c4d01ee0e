"""The harness inside a training run: every ``eval_steps`` steps, score the task's eval split and log it.

The trainer calls ``evaluate_during_training(run, step)`` on every process; the main process evaluates
(greedy, the first ``eval_limit`` docs, the run's own prompt settings and completion limit) while the
others wait, so the numbers match `mmreason eval --limit eval_limit` on the saved checkpoint with
``max_new_tokens = rollout.max_completion_length``. The per-doc records go to
``<output_dir>/eval/step-<step>_samples_<task>.jsonl``; the returned metrics are ``eval/<task>/<metric>``.
The model is generated from unwrapped (``accelerator.unwrap_model``); a model the trainer sharded with
FSDP2 (``mmreason.parallel.sharding``) has its parameters gathered on every process first, so the main process
generates alone without collectives.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mmreason.eval.metrics import aggregate
from mmreason.eval.scoring import PromptOptions, ScoringOptions, score_task
from mmreason.eval.tasks import EvalTask, load_task
from mmreason.media.limits import media_fields
from mmreason.parallel.agree import any_rank
from mmreason.parallel.sharding import gathered
from mmreason.rollout.backends import EngineDied
from mmreason.rollout.env_plugin import EnvironmentFactory
from mmreason.rollout.generate import GenerationSettings

if TYPE_CHECKING:
    import torch
    from accelerate import Accelerator
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

    from mmreason.taskpack import TaskPack

_TASKS: dict[str, EvalTask] = {}  # the eval split is loaded once per run, not once per eval


class TrainingRun(Protocol):
    """What the in-training evaluation reads of a run (``train.setup.Run``, which eval may not import)."""

    @property
    def cfg(self) -> Any: ...  # the run's TrainConfig (mmreason.train.config): data, rollout, eval_limit, seed

    @property
    def accelerator(self) -> Accelerator: ...

    @property
    def model(self) -> torch.nn.Module: ...

    @property
    def processor(self) -> ProcessorMixin: ...

    @property
    def pack(self) -> TaskPack: ...


def _eval_task(
    cfg: Any,
    tokenizer: PreTrainedTokenizerBase | None = None,
    limit: int | None = None,
    environment: EnvironmentFactory | None = None,
) -> EvalTask:
    """The run's eval split, its first ``limit`` docs (None: ``cfg.eval_limit``, which None leaves whole);
    ``environment``: the run's own (``rollout.environment``), attached as in training."""
    d = cfg.data
    limit = limit if limit is not None else cfg.eval_limit
    key = json.dumps(
        [d.task, d.eval_path, d.task_args, limit, cfg.seed, d.max_prompt_length, getattr(environment, "ref", None)],
        sort_keys=True,
        default=str,
    )
    if key not in _TASKS:
        _TASKS[key] = load_task(
            d.task,
            d.eval_path,
            limit,
            d.task_args,
            cfg.seed,
            max_prompt_length=d.max_prompt_length,
            tokenizer=tokenizer,
            environment=environment,
            max_turns=cfg.rollout.max_turns if environment is not None else None,
        )
    return _TASKS[key]


def run_environment(run: TrainingRun) -> EnvironmentFactory | None:
    """The environment ``rollout.environment`` attached to the run's pack (None for a pack's own or none)."""
    return run.pack.make_environment if isinstance(run.pack.make_environment, EnvironmentFactory) else None


def has_eval_split(cfg: Any, tokenizer: PreTrainedTokenizerBase | None = None, *, limit: int | None = None) -> bool:
    """Whether the run's task loads a non-empty eval split (a pack without one raises or returns none)."""
    try:
        return bool(_eval_task(cfg, tokenizer, limit).samples)
    except (FileNotFoundError, ValueError, KeyError, NotImplementedError, OSError):
        return False


def training_options(cfg: Any) -> ScoringOptions:
    """Greedy decoding with the run's completion limit and prompt settings; G docs per generate call."""
    prompt = PromptOptions(**media_fields(cfg.data), overflow=cfg.data.prompt_overflow)
    settings = GenerationSettings(max_new_tokens=cfg.rollout.max_completion_length, temperature=0.0)
    return ScoringOptions(settings, prompt, batch_size=max(1, cfg.rollout.num_generations), seed=cfg.seed)


def evaluate_during_training(run: TrainingRun, step: int, *, limit: int | None = None) -> dict[str, float]:
    """``eval/<task>/<metric>`` means (and ``eval/<task>/n_failed``) on the main process; {} elsewhere, over the
    first ``limit`` docs (None: the run's ``eval_limit``; the trainer passes the limit it derived from the config).

    Every process learns whether the evaluation succeeded: an exception on the main process is raised
    there and a ``RuntimeError`` naming it on the others (none is left waiting)."""
    accelerator = run.accelerator
    metrics, error = {}, None
    with gathered(accelerator.unwrap_model(run.model)):  # every process: a sharded model generates whole
        if accelerator.is_main_process:
            try:
                metrics = _evaluate(run, step, limit)
            except Exception as exc:  # noqa: BLE001 - raised below, after every process has heard of it
                error = exc
    if any_rank(accelerator, error is not None):  # also the barrier the other processes wait at
        # an engine that died or timed out stops every process as an engine death (each saves and stops)
        engine_died = any_rank(accelerator, isinstance(error, EngineDied))
        if error is not None:
            raise error
        if engine_died:
            raise EngineDied(f"in-training evaluation at step {step}: the vLLM engine failed on the main process")
        raise RuntimeError(f"in-training evaluation at step {step} failed on the main process")
    return metrics


def _evaluate(run: TrainingRun, step: int, limit: int | None) -> dict[str, float]:
    accelerator = run.accelerator
    task = _eval_task(run.cfg, run.processor.tokenizer, limit, run_environment(run))
    model = accelerator.unwrap_model(run.model)
    was_training = model.training
    model.eval()
    engine = getattr(run, "rollout_backend", None)  # vLLM: the engine holds this step's weights
    try:
        records = score_task(engine or model, run.processor, task, training_options(run.cfg))
    finally:
        model.train(was_training)
    _write_samples(Path(run.cfg.output_dir) / "eval" / f"step-{step}_samples_{task.file_name}.jsonl", records)
    metrics: dict[str, float] = {}
    for name, summary in aggregate(records, list(task.metrics)).items():
        metrics[f"eval/{task.name}/{name}"] = summary.value if summary.value is not None else math.nan
    metrics[f"eval/{task.name}/n_failed"] = float(sum("error" in r for r in records))
    return metrics


def _write_samples(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records), encoding="utf-8")
