"""Build a run's components from its config: accelerator, model(s), processor, optimizer, data, rewards.

Composition, not inheritance: the run loop (``loop.py``) and the steps of GRPO (``step.py``) and SFT (``sft.py``)
hold a ``Run`` of components and call small phase functions on it.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedDataParallelKwargs, set_seed
from transformers import ProcessorMixin, get_scheduler

from mmreason.config import ConfigError, dump_yaml
from mmreason.models.loading import (
    ModelConfig,
    backend_note,
    load_model,
    load_processor,
    trainable_parameters,
    vision_tower,
)
from mmreason.parallel.agree import any_rank
from mmreason.parallel.sharding import (
    ensure_process_group,
    is_sharded,
    needs_own_sharding,
    plain_accelerator_env,
    shard_model,
    sharding_dtypes,
    wrap_classes,
)
from mmreason.rewarding import RewardRunner, RewardSpec
from mmreason.rollout.prompts import MediaTime, PromptInputs
from mmreason.rundir import RunDir, RunDirError, claim_output_dir
from mmreason.sampling import SAMPLERS
from mmreason.sampling.anchors import AnchorBuffer
from mmreason.sampling.base import PromptSampler
from mmreason.sampling.difficulty import DifficultyAugmenter
from mmreason.sampling.stream import StreamSampler
from mmreason.taskpack import TASKS, TaskPack
from mmreason.train.config import RewardConfig, TrainConfig
from mmreason.train.environment import run_environment, with_environment
from mmreason.train.launch_checks import check_launch
from mmreason.train.logging import RunLogger
from mmreason.train.loss_extras import LossExtras
from mmreason.train.precision import MasterWeightAdamW, needs_master_weights
from mmreason.types import Sample, Trajectory

if TYPE_CHECKING:  # the producer imports the round's phases, which take a Run
    from mmreason.train.async_rollouts import AsyncRollouts

log = logging.getLogger(__name__)


class Scheduler(Protocol):
    """The learning-rate schedule as the loop uses it (a torch LRScheduler, or accelerate's wrapper of one)."""

    def step(self) -> None: ...

    def get_last_lr(self) -> list[float]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class RolloutEngine(Protocol):
    """A rollout engine as the trainer uses it (``train/rollout_backend.py``; the vLLM backends in
    ``mmreason.rollout.backends``): it samples the step's groups and takes the policy's weights after each update."""

    is_rollout_backend: bool

    def generate_groups(self, prompts: Sequence[PromptInputs], *args: Any, **kwargs: Any) -> list[Trajectory]: ...

    def sample(self, prompts: Sequence[PromptInputs], *args: Any, **kwargs: Any) -> list[Any]: ...

    def sync_weights(self, model: torch.nn.Module, *args: Any, **kwargs: Any) -> float: ...

    def close(self) -> None: ...


@dataclass
class Counters:
    bad_samples: int = 0
    filtered_prompts: int = 0
    nan_steps: int = 0
    reward_errors: int = 0
    dropped_groups: int = 0
    env_faults: int = 0  # episodes ended by an exception inside the environment
    # tool calls that did not run (unreadable, unknown, off-schema): error observations
    bad_tool_calls: int = 0
    # prompts / observations whose media would not reach the model (rollout.visibility)
    unseen_media: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class Run:
    """A run's components (built by ``setup_run``) and its state between steps; every field is declared here."""

    cfg: TrainConfig
    accelerator: Accelerator
    # prepared by accelerate (DDP-wrapped with several processes), or sharded
    model: torch.nn.Module
    processor: ProcessorMixin
    optimizer: torch.optim.Optimizer
    scheduler: Scheduler
    pack: TaskPack
    # a list, or a streamed dataset read in stream order (data.streaming)
    dataset: Sequence[Sample]
    sampler: PromptSampler
    logger: RunLogger | None = None
    augmenter: DifficultyAugmenter | None = None  # when cfg.augment.enabled
    ref_model: torch.nn.Module | None = None  # when algorithm.beta > 0
    rewards: RewardRunner | None = None
    counters: Counters = field(default_factory=Counters)
    media_time: MediaTime = field(default_factory=MediaTime)  # video header reads and decoding, summed
    step: int = 0
    loss_extras: LossExtras = field(default_factory=LossExtras)  # the loss's providers (train/loss_extras.py)
    # R³ replay: past successes per prompt (sampling/anchors.py), in memory
    anchor_buffer: AnchorBuffer | None = None
    # a vLLM engine when rollout.backend=vllm (train/rollout_backend.py)
    rollout_backend: RolloutEngine | None = None
    # the engine died taking a finished step's weights (train/step.py)
    engine_fault: Exception | None = None
    async_rollouts: AsyncRollouts | None = (
        # rollout.async_generation's producer, set by the loop (loop.start_engine)
        None
    )
    # the claimed output_dir (lock, run id) of a run that owns it (mmreason.rundir)
    output: RunDir | None = None
    # a fault that stops the run at the next agreement point (agree.hold)
    pending_stop: BaseException | None = None

    @property
    def run_id(self) -> str | None:
        """Return the id written into this run's checkpoints (None for a Run that does not own its output_dir)."""
        return self.output.run_id if self.output is not None else None

    def adopt(self, state: dict[str, Any]) -> None:
        """Adopt the id of the run that wrote the checkpoint: a resumed run continues that run, so rotation goes on over
        its checkpoints (a checkpoint written before run ids keeps this run's new id)."""
        if self.output is not None and isinstance(state.get("run_id"), str):
            self.output.run_id = state["run_id"]

    def release(self) -> None:
        """Give the output_dir's lock back (the end of the run, however it ends)."""
        if self.output is not None:
            self.output.release()

    @property
    def device(self) -> torch.device:
        return self.accelerator.device

    def event(self, kind: str, /, **fields: Any) -> None:
        """Log a fault or notable event in events.log (skipped sample, reward error, non-finite step)."""
        if self.logger is not None:
            self.logger.event(kind, **fields)


def make_accelerator(cfg: TrainConfig) -> Accelerator:
    cpu = not torch.cuda.is_available()
    trackers = [t for t in cfg.report_to if _tracker_available(t)]
    # The model's buffers are constants (rotary frequencies): no broadcast of them before every forward,
    # which would make each forward a collective that every process must run the same number of times.
    ddp = DistributedDataParallelKwargs(broadcast_buffers=False)
    # The trainer steps the schedule itself, once per optimizer step (never after a skipped update): accelerate's
    # default would step it once per process per step, running it N times too fast on N processes.
    # FSDP2 is the trainer's own, on every device (parallel/sharding.py)
    with plain_accelerator_env():
        accelerator = Accelerator(
            cpu=cpu,
            log_with=trackers or None,
            project_dir=cfg.output_dir,
            kwargs_handlers=[ddp],
            step_scheduler_with_optimizer=False,
        )
    set_seed(cfg.seed)
    threads = cfg.num_threads or threads_per_process()
    if threads:
        torch.set_num_threads(threads)
    return accelerator


def threads_per_process() -> int | None:
    """Count the torch CPU threads of one training process started by a launcher: the cores this process may use divided
    by the processes on this machine (``LOCAL_WORLD_SIZE``), at least 1, so that processes do not oversubscribe the
    cores. None outside a launcher (torch's default: ``OMP_NUM_THREADS`` or all cores). ``num_threads`` in the config
    overrides both."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE") or 0)
    if local < 1:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // local)


def _tracker_available(name: str) -> bool:
    module = {"tensorboard": "tensorboard", "wandb": "wandb"}.get(name, name)
    if importlib.util.find_spec(module) is None:
        log.warning("report_to: %s is not installed; not logging to it", name)
        return False
    return True


def load_task_data(cfg: TrainConfig, split: str = "train") -> tuple[TaskPack, list[Sample]]:
    pack = TASKS.get(cfg.data.task)
    path = cfg.data.train_path if split == "train" else cfg.data.eval_path
    options = pack.check_options(dict(cfg.data.task_args), key="data.task_args")
    if cfg.data.streaming and split == "train":
        if "streaming" not in inspect.signature(pack.load).parameters:
            raise ConfigError(f"data.streaming: task {cfg.data.task!r} has no streaming loader")
        options.update(streaming=True, buffer_size=cfg.data.shuffle_buffer)
    samples = pack.load(path, split, **options)
    if not samples:
        raise ValueError(f"task {cfg.data.task!r}: the {split} split is empty ({path or 'built-in data'})")
    return pack, samples


def build_optimizer(
    cfg: TrainConfig, model: torch.nn.Module, total_steps: int
) -> tuple[torch.optim.Optimizer, Scheduler]:
    groups = parameter_groups(model, cfg)
    # bf16 / fp16 weights: AdamW on fp32 master copies (train/precision.py); a sharded model's parameters are
    # already fp32 masters (parallel/sharding.py)
    sharded = is_sharded(model)
    master = cfg.model.master_weights and needs_master_weights(model.parameters()) and not sharded
    # optim=adamw_torch_fused: one kernel over all tensors (a sharded model keeps the foreach loop)
    optimizer = (MasterWeightAdamW if master else torch.optim.AdamW)(
        groups,
        lr=cfg.learning_rate,
        weight_decay=cfg.weight_decay,
        betas=(cfg.adam_beta1, cfg.adam_beta2),
        fused=cfg.optim == "adamw_torch_fused" and not sharded,
    )
    scheduler = get_scheduler(
        cfg.lr_scheduler_type,
        optimizer,
        num_warmup_steps=int(cfg.warmup_ratio * total_steps),
        num_training_steps=max(total_steps, 1),
    )
    return optimizer, scheduler


def parameter_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict[str, Any]]:
    """Put the trainable parameters in optimizer groups: the vision tower at ``vision_learning_rate``, its projector at
    ``projector_learning_rate``, everything else (the language model, LoRA weights) at ``learning_rate``. An unset rate
    is the base rate; a group with no trainable parameter is left out."""
    base = getattr(model, "get_base_model", None)  # a PEFT model's wrapped one
    tower = vision_tower(base() if base is not None else model)
    projector = getattr(tower, "merger", None) if tower is not None else None
    ids_projector = {id(p) for p in projector.parameters()} if projector is not None else set()
    ids_tower = {id(p) for p in tower.parameters()} - ids_projector if tower is not None else set()
    named: dict[str, tuple[float | None, list[torch.nn.Parameter]]] = {
        "vision": (cfg.vision_learning_rate, []),
        "projector": (cfg.projector_learning_rate, []),
        "language": (None, []),
    }
    for p in model.parameters():
        if p.requires_grad:
            key = "projector" if id(p) in ids_projector else "vision" if id(p) in ids_tower else "language"
            named[key][1].append(p)
    return [
        {"name": name, "params": params, "lr": cfg.learning_rate if lr is None else lr}
        for name, (lr, params) in named.items()
        if params
    ]


def setup_run(
    cfg: TrainConfig,
    *,
    total_steps: int | None = None,
    with_rewards: bool = True,
    config_dir: str | None = None,
    verbose: bool = True,
    own_output_dir: bool = False,
) -> Run:
    """Build the run's components. ``own_output_dir`` (``mmreason train`` / ``sft``): lock ``output_dir`` for this run
    and refuse one that holds anything unless ``resume`` or ``overwrite_output_dir`` (``claim``); the caller gives the
    lock back with ``Run.release``."""
    TASKS.get(cfg.data.task).check_options(cfg.data.task_args, key="data.task_args")  # before anything loads
    # DeepSpeed, pre-Ampere bf16 / flash-attn refused; FSDP units (train/launch_checks.py)
    check_launch(cfg)
    accelerator = make_accelerator(cfg)
    output = claim(cfg, accelerator) if own_output_dir else None
    try:
        run = _components(cfg, accelerator, total_steps, with_rewards, config_dir, verbose=verbose)
    except BaseException:
        if output is not None:
            output.release()
        raise
    run.output = output
    return run


def claim(cfg: TrainConfig, accelerator: Accelerator) -> RunDir | None:
    """Claim ``output_dir`` on the main process (``mmreason.rundir``); when it cannot, every process raises."""
    output: RunDir | None = None
    error: RunDirError | None = None
    if accelerator.is_main_process:
        try:
            output = claim_output_dir(cfg.output_dir, resume=cfg.resume, overwrite=cfg.overwrite_output_dir)
        except RunDirError as exc:
            error = exc
    if any_rank(accelerator, error is not None):
        if error is not None:
            raise error
        raise RunDirError(f"output_dir {cfg.output_dir!r}: the main process could not claim it")
    return output


def _components(
    cfg: TrainConfig,
    accelerator: Accelerator,
    total_steps: int | None,
    with_rewards: bool,
    config_dir: str | None,
    *,
    verbose: bool,
) -> Run:
    out = Path(cfg.output_dir)
    verbose = verbose and accelerator.is_main_process
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        dump_yaml(cfg, out / "config.yaml")
    if verbose:
        print("resolved config:\n" + dump_yaml(cfg))
    processor = load_processor(cfg.model.name_or_path, cfg.data.min_pixels, cfg.data.max_pixels)
    environment = run_environment(cfg, processor, config_dir)  # rollout.environment, checked before the model
    model = load_model(cfg.model)
    trainable, total = trainable_parameters(model)
    if verbose:
        print(
            f"model: {cfg.model.name_or_path} ({total:,} parameters, {trainable:,} trainable); "
            f"processes: {accelerator.num_processes} ({accelerator.distributed_type.value.lower()}, "
            f"{accelerator.device}, {torch.get_num_threads()} CPU threads each)"
        )
        print(
            backend_note(
                getattr(model.config, "_attn_implementation", None) or cfg.model.attn_implementation,
                next(model.parameters()).dtype,
                getattr(getattr(cfg, "rollout", None), "backend", "hf"),
            )
        )
    model = place_model(model, accelerator, verbose=verbose)
    ref_model = None
    if cfg.algorithm.beta > 0:
        ref_cfg = ModelConfig(**{**cfg.model.__dict__, "lora": False, "gradient_checkpointing": False})
        ref_model = place_reference(load_model(ref_cfg, trainable=False), accelerator)
    pack, dataset = load_task_data(cfg)
    pack = with_environment(cfg, pack, environment)
    steps = total_steps if total_steps is not None else cfg.max_steps
    model, optimizer, scheduler = prepare_training(
        cfg, accelerator, model, steps * cfg.algorithm.num_iterations * cfg.steps_per_generation
    )
    sampler = make_sampler(cfg, dataset)
    rewards = build_rewards(cfg, pack, config_dir) if with_rewards else None
    return Run(
        cfg,
        accelerator,
        model,
        processor,
        optimizer,
        scheduler,
        pack,
        dataset,
        sampler,
        ref_model=ref_model,
        rewards=rewards,
        augmenter=build_augmenter(cfg),
        loss_extras=LossExtras.for_loss(cfg.algorithm.policy_loss, cfg.algorithm.loss_options),
    )


def place_model(model: torch.nn.Module, accelerator: Accelerator, *, verbose: bool = False) -> torch.nn.Module:
    """Place the policy on its device before anything refers to its parameters (the optimizer, its fp32 masters):
    sharded by the trainer under FSDP2 (``parallel.sharding``, the same on CPUs and GPUs), else moved to the
    accelerator's device (where accelerate's ``prepare`` would move it, after the optimizer had copied it)."""
    if not needs_own_sharding(accelerator):
        return model.to(accelerator.device)
    ensure_process_group(accelerator.device)
    storage, compute = sharding_dtypes(next(model.parameters()).dtype, accelerator.mixed_precision)
    model = shard_model(model, wrap_classes(), mixed_precision=accelerator.mixed_precision, device=accelerator.device)
    if verbose:
        print(
            f"fsdp2: each {' / '.join(wrap_classes())} and the root sharded over {accelerator.num_processes} "
            f"process(es) (torch fully_shard); parameters in {storage}, computed in {compute or storage}"
        )
    return model


def place_reference(model: torch.nn.Module, accelerator: Accelerator) -> torch.nn.Module:
    """Place the reference model like the policy: sharded over the processes under FSDP2 (in its own dtype, every unit
    resharded after each forward: ``shard_model(frozen=True)``), else a whole copy on the device."""
    if not needs_own_sharding(accelerator):
        return model.to(accelerator.device)
    return shard_model(model, wrap_classes(), device=accelerator.device, frozen=True)


def prepare_training(
    cfg: TrainConfig, accelerator: Accelerator, model: torch.nn.Module, total_steps: int
) -> tuple[torch.nn.Module, torch.optim.Optimizer, Scheduler]:
    """Prepare (model, optimizer, scheduler) with accelerate: the optimizer is built on the placed model's own
    parameters (``place_model``), so its fp32 masters (``MasterWeightAdamW``) live beside them on their device; a
    sharded model is not handed to ``prepare`` (it is already sharded and placed)."""
    optimizer, scheduler = build_optimizer(cfg, model, total_steps)
    if is_sharded(model):
        optimizer, scheduler = accelerator.prepare(optimizer, scheduler)
        return model, optimizer, scheduler
    return accelerator.prepare(model, optimizer, scheduler)


def make_sampler(cfg: TrainConfig, dataset: Sequence[Sample]) -> PromptSampler:
    """Make the config's prompt sampler; a streamed dataset (``data.streaming``) is read in stream order."""
    if not cfg.data.streaming:
        return SAMPLERS.get(cfg.sampler.name)(len(dataset), seed=cfg.seed, **cfg.sampler.options)
    if cfg.sampler.name != "uniform" or cfg.sampler.options:
        raise ConfigError(
            f"sampler.name={cfg.sampler.name!r}: a streamed dataset is read in stream order "
            "(data.streaming); leave the sampler at uniform"
        )
    return StreamSampler(dataset, seed=cfg.seed)


def build_augmenter(cfg: TrainConfig) -> DifficultyAugmenter | None:
    """Build the difficulty-aware augmenter of ``cfg.augment`` (None when it is off)."""
    if not cfg.augment.enabled:
        return None

    options = {k: v for k, v in vars(cfg.augment).items() if k != "enabled"}
    return DifficultyAugmenter(**options, seed=cfg.seed)


def build_rewards(cfg: TrainConfig, pack: TaskPack, config_dir: str | None = None) -> RewardRunner:
    """Build the reward runner: the config's rewards, or the task pack's defaults when the config names none."""
    specs: list[RewardSpec] = []
    for r in run_rewards(cfg, pack):
        ref = r.name
        column = r.column or (ref.rsplit(":", 1)[1] if ":" in ref else ref)
        specs.append(RewardSpec(name=column, ref=ref, weight=r.weight, kwargs=dict(r.kwargs), isolation=r.isolation))
    return RewardRunner(
        specs,
        timeout_s=cfg.reward_timeout_s,
        on_error=cfg.reward_on_error,
        max_reward_errors=cfg.max_reward_errors,
        base_dir=config_dir or os.getcwd(),
    )


def run_rewards(cfg: TrainConfig, pack: TaskPack) -> list[RewardConfig]:
    """Return the rewards a run scores with: the config's ``rewards``, else the pack's defaults (stated once, in the
    pack; a recipe lists rewards only to change them)."""
    return cfg.rewards or [_reward_config(r) for r in pack.rewards]


def _reward_config(mapping: dict[str, Any]) -> RewardConfig:
    m = dict(mapping)
    return RewardConfig(
        name=m.pop("name"), weight=m.pop("weight", 1.0), kwargs=m.pop("kwargs", {}), column=m.pop("column", None)
    )
