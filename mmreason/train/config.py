"""The run config of `mmreason train` / `mmreason sft`: every default in one typed place, and the start-up
checks that every algorithm option reaches the component it names (``check_algorithm_options``).

Names follow TRL's GRPOConfig where the concept exists there (num_generations, max_completion_length,
temperature, top_p, beta, epsilon, epsilon_high, num_iterations, loss_type, scale_rewards,
learning_rate, ...) and EasyR1's for data (min_pixels, max_pixels, video_fps, max_prompt_length).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from mmreason import rl
from mmreason.config import ConfigError
from mmreason.health.config import HealthConfig
from mmreason.media.limits import MediaLimits, PromptOverflow
from mmreason.models.loading import ModelConfig
from mmreason.rewarding.records import Isolation as RewardIsolation
from mmreason.rl.loss_inputs import FIELDS, ImportanceSamplingLevel
from mmreason.rl.options import check_choices, check_options, choices_of, keyword_options
from mmreason.rollout.backends.connection import RolloutBackend, VllmConnection, VllmMode
from mmreason.train.within_step import WithinStepConfig, resolve_within_step

# The closed sets of strings a run config takes (the loader refuses any other value, naming the key).
WeightSync = Literal["collective", "directory"]
VllmLora = Literal["adapter", "merged"]
ImportanceSamplingMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]  # rl IS_MODES
ScaleRewards = Literal["group", "batch", "none"]  # rl/estimators/grpo.py SCALES
LossType = Literal["grpo", "bnpo", "dapo", "dr_grpo", "luspo"]  # rl/losses/aggregation.py LOSS_TYPES

AnchorSource = Literal["replay", "reference", "reflect"]
RewardOnError = Literal["none", "zero"]
RewardMissing = Literal["zero", "renormalize"]


@dataclass
class DataConfig(MediaLimits):
    """The task's data and how its prompts are built: the media and prompt limits (``min_pixels``,
    ``max_pixels``, ``video_fps``, ``video_max_frames``, ``video_min_pixels``, ``video_max_pixels``,
    ``video_total_pixels``, ``max_prompt_length``, ``system_prompt``) are ``MediaLimits``' (mmreason/media/limits.py),
    shared with the eval's ``--model_args``."""

    task: str = "shapes"  # a registered task pack (`mmreason list tasks`)
    # JSONL/parquet in the pack's data shape; None = the pack's own data
    train_path: str | None = None
    eval_path: str | None = None
    task_args: dict[str, Any] = field(default_factory=dict)  # passed to the pack's loader
    # read train_path as a stream (rows in a seeded shuffle buffer; a loader that takes ``streaming``); the
    # position is saved in checkpoints (mmreason/sampling/stream.py)
    streaming: bool = False
    shuffle_buffer: int = 1000  # streaming: rows in the shuffle buffer
    # training's default (MediaLimits' is the eval's): longer prompts are filtered
    max_prompt_length: int = 4096
    prompt_overflow: PromptOverflow = "filter"

    RANGES: ClassVar[dict[str, str]] = {"shuffle_buffer": "[1, inf)"}


@dataclass
class RolloutConfig(VllmConnection):
    """How rollouts are sampled; the ``vllm_server_*`` and ``vllm_generate_timeout`` keys are ``VllmConnection``'s
    (mmreason/rollout/backends/connection.py), shared with the eval's ``--model_args``."""

    num_generations: int = 8  # G rollouts per prompt
    max_completion_length: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    max_turns: int = 1  # >1 with an environment: assistant turns per trajectory
    # an environment observation longer than this ends the episode
    max_observation_tokens: int = 1024
    # an environment step running longer ends its episode (a counted environment fault); None = no limit.
    # See mmreason/rollout/deadline.py for what can be interrupted.
    env_step_timeout_s: float | None = 60.0
    # Your environment on any task (docs/extending.md "Write an environment"): "pkg.module:Factory" or
    # "path/file.py:Factory" (relative to the config file, then the cwd), built per episode as
    # Factory(**environment_args); needs max_turns > 1. None: the task pack's own environment, if it has one.
    environment: str | None = None
    environment_args: dict[str, Any] = field(default_factory=dict)
    # Rollout backend (docs/vllm.md): hf = HF generate in the training process; vllm = a vLLM engine (TRL's
    # knob names below). colocate: the engine lives in the training job; server: `mmreason vllm-serve`.
    backend: RolloutBackend = "hf"
    vllm_mode: VllmMode = "colocate"
    # more servers, "host:port,host:port": prompts spread, pushes reach all
    vllm_server_hosts: str | None = None
    vllm_gpu_memory_utilization: float = 0.3
    # colocate, GPU: the engine sleeps during the update (refused on CPU)
    vllm_enable_sleep_mode: bool = False
    vllm_max_model_length: int | None = None  # None: max_prompt_length + max_completion_length
    # colocate: 1 (more is refused before the model loads); server: the server's
    vllm_tensor_parallel_size: int = 1
    # seconds a weight push may take; past it the engine counts as dead
    vllm_weight_sync_timeout: float = 600.0
    vllm_kv_cache_gib: float = 1.0  # CPU only: the engine's KV cache (VLLM_CPU_KVCACHE_SPACE)
    # The colocated engine's batching (docs/vllm.md "Batching"; None: sized as TRL's colocate mode sizes them)
    vllm_max_num_seqs: int | None = None  # None: the rows of one step, prompts_per_step x G
    vllm_max_num_batched_tokens: int | None = None  # None: 4096 with chunked prefill, else the context
    vllm_enable_chunked_prefill: bool | None = None  # None: on with a GPU, off on CPU (refused there)
    # How weights reach the engine: collective = colocated: in-process through its worker; server mode: a
    # broadcast through a process group (gloo on CPU, NCCL on GPUs) in buckets of at most vllm_sync_bucket_mb;
    # directory = a safetensors file it reloads
    vllm_weight_sync: WeightSync = "collective"
    vllm_sync_bucket_mb: float = 64.0
    # a LoRA policy: adapter = push only the adapter, loaded by the engine as one (where vLLM can, docs/vllm.md);
    # merged = push the weights with LoRA merged in
    # adapter: push LoRA weights only (docs/vllm.md); merged: merge, push all
    vllm_lora: VllmLora = "adapter"
    # Truncated importance sampling of the sampler-trainer mismatch (mmreason/rl/rollout_correction.py)
    vllm_importance_sampling_correction: bool = True
    vllm_importance_sampling_mode: ImportanceSamplingMode = "token_truncate"
    vllm_importance_sampling_cap: float = 2.0
    vllm_importance_sampling_min: float | None = None  # lower bound C_min (TRL's _clip_min); None = none
    # HF backend: record each sampled token's log-prob as the sampler drew it (no extra forward), so the trainer
    # logs the mismatch/* gap as for vLLM; the correction above applies to HF rollouts only with
    # hf_importance_sampling_correction (docs/vllm.md "Rollout-trainer mismatch")
    hf_sampler_logprobs: bool = False
    hf_importance_sampling_correction: bool = False
    # Off-policy generation (train/async_rollouts.py, docs/training.md): the next steps' rollouts (episodes too)
    # are sampled by the engine, or with backend hf a copy of the policy, while step s's update runs;
    # max_staleness bounds (s - 1) - the sampling policy's version (0 = synchronous, 1 = one-step-off)
    async_generation: bool = False
    max_staleness: int = 1

    RANGES: ClassVar[dict[str, str]] = {
        "num_generations": "[1, inf)",
        "max_completion_length": "[1, inf)",
        # sampling; 0 would be greedy: all G rollouts of a group the same
        "temperature": "(0, inf)",
        "top_p": "(0, 1]",
        "top_k": "[1, inf)",
        "max_turns": "[1, inf)",
        "max_observation_tokens": "[1, inf)",
        "env_step_timeout_s": "(0, inf)",
        "vllm_gpu_memory_utilization": "(0, 1]",
        "vllm_max_model_length": "[1, inf)",
        "vllm_tensor_parallel_size": "[1, inf)",
        "vllm_weight_sync_timeout": "(0, inf)",
        "vllm_kv_cache_gib": "(0, inf)",
        "vllm_max_num_seqs": "[1, inf)",
        "vllm_max_num_batched_tokens": "[1, inf)",
        "vllm_importance_sampling_cap": "[1, inf)",
        "vllm_importance_sampling_min": "[0, 1]",
        "vllm_sync_bucket_mb": "(0, inf)",
        "max_staleness": "[0, inf)",
    }


@dataclass
class RewardConfig:
    """One reward component. ``name`` is a registered reward (`mmreason list rewards`) or a reference
    ``pkg.module:function`` / ``path/to/file.py:function`` (relative to the config file, then the cwd);
    ``weight`` is a number, or ``{sub-score: weight}`` for a reward that returns named sub-scores."""

    name: str
    weight: float | dict[str, float] = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)
    column: str | None = None  # the logged name (default: the registered or function name)
    # auto: process (a killable worker) for references, thread for built-ins
    isolation: RewardIsolation = "auto"

    RANGES: ClassVar[dict[str, str]] = {"weight": "(-inf, inf)"}  # any finite number; a dict's values too


@dataclass
class AlgorithmConfig:
    estimator: str = "grpo"  # `mmreason list estimators`, or pkg.module:fn | file.py:fn
    estimator_options: dict[str, Any] = field(default_factory=dict)
    scale_rewards: ScaleRewards = "group"  # estimators that take it (grpo)
    policy_loss: str = "clipped"  # clipped | reg_grpo | pkg.module:fn | file.py:fn
    loss_options: dict[str, Any] = field(default_factory=dict)  # the loss's own options (delta, eps_r ...)
    # TRL's names -> the token aggregation (rl/losses/aggregation.py)
    loss_type: LossType = "grpo"
    epsilon: float = 0.2
    epsilon_high: float | None = None  # clip-higher (DAPO: 0.28); None = epsilon
    importance_sampling_level: ImportanceSamplingLevel = "token"  # sequence: GSPO
    num_iterations: int = 1  # policy updates per batch of rollouts (PPO epochs)
    # KL coefficient to the reference model; 0 = no reference model
    beta: float = 0.0
    # a registered estimator: k1 | k2 | k3 (= low_var_kl) | yours (rl.register_kl_estimator)
    kl_estimator: str = "k3"
    # DAPO: draw more prompts until the step has prompts_per_step groups whose rewards vary (zero-variance
    # groups left over at the cap stay out of the loss); see train/collect.py
    dynamic_sampling: bool = False
    dynamic_sampling_max_draws: int = 3  # extra prompt batches a step may draw
    # sample column naming a trajectory's task (G2RPO task_batch, per-task metrics); None = the task pack's
    # own (the vision pack: domain)
    task_key: str | None = None
    # lambda_ent of the entropy band penalty (OpenVLThinkerV2); 0 = off
    entropy_coef: float = 0.0
    entropy_band: dict[str, list[float]] = field(default_factory=dict)  # task -> [H_min, H_max]; key
    # "default" for tasks not listed
    off_policy_mask_threshold: float | None = None  # DeepSeek-V3.2 off-policy sequence mask (TRL's name): a
    # row with A < 0 whose mean behaviour-to-current log-prob gap exceeds it leaves the loss; None = off

    RANGES: ClassVar[dict[str, str]] = {
        "epsilon": "(0, inf)",
        "epsilon_high": "(0, inf)",
        "num_iterations": "[1, inf)",
        "beta": "[0, inf)",
        "dynamic_sampling_max_draws": "[0, inf)",
        "entropy_coef": "[0, inf)",
        "off_policy_mask_threshold": "[0, inf)",
    }


@dataclass
class SamplerConfig:
    name: str = "uniform"  # a registered prompt sampler (mmreason.sampling.SAMPLERS)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class AugmentConfig:
    """Difficulty-aware augmentation (DeepVideo-R1; mmreason/sampling/difficulty.py): a group whose rewards are
    all equal and whose mean is far from the recent groups' is regenerated with a hint (too hard) or with
    noise on its video frames (too easy)."""

    enabled: bool = False
    window: int = 100  # FIFO of recent group mean rewards
    min_buffer: int = 20  # groups in the FIFO before anything is augmented
    r_max: float = 1.0  # the largest total reward (normalises |ΔR|)
    threshold: float = 0.1  # augment only when |ΔR| > threshold * r_max
    # hint = the first hint_min + hint_span * d of the best earlier trace's words
    hint_min: float = 0.2
    hint_span: float = 0.6
    noise_max: float = 0.3  # frame noise sigma = noise_max * d ([0, 1] pixel units)
    uniform_only: bool = True  # only groups whose rewards are all equal

    RANGES: ClassVar[dict[str, str]] = {
        "window": "[1, inf)",
        "min_buffer": "[0, inf)",
        "r_max": "(0, inf)",
        "threshold": "[0, inf)",
        "hint_min": "[0, 1]",
        "hint_span": "[0, 1]",
        "noise_max": "[0, inf)",
    }


@dataclass
class RefineConfig:
    """iGRPO (arXiv 2602.09000; mmreason/sampling/refine.py): each group's rollouts are drafts; the prompt is
    rolled out again with its best draft appended, and the step trains on those refinements."""

    enabled: bool = False
    template: str = "\nHere is a previous attempt at this question:\n{draft}\nImprove on it and give your final answer."
    # the draft's first characters that go into the refinement prompt
    max_draft_chars: int = 4_000

    RANGES: ClassVar[dict[str, str]] = {"max_draft_chars": "[1, inf)"}


@dataclass
class AnchorConfig:
    """Off-policy anchors for all-fail groups (mmreason/sampling/anchors.py): R³ replay of the prompt's past
    successes (``source: replay``) or DaGRPO's reference answer (``source: reference``) replaces one rollout."""

    enabled: bool = False
    # reflect: R³'s in-context reflection (roll out again with a failure)
    source: AnchorSource = "replay"
    # a group all fails when every total reward is <= this; a success is one above it
    threshold: float = 0.0
    buffer_size: int = 4  # replay: successes kept per prompt
    reflect_template: str = (
        "\nA previous attempt at this question was wrong:\n{draft}\nAvoid its mistakes and give your final answer."
    )

    RANGES: ClassVar[dict[str, str]] = {"threshold": "(-inf, inf)", "buffer_size": "[1, inf)"}


@dataclass
class HintConfig:
    """SAGE self-hinting (arXiv 2602.03143; mmreason/sampling/hinting.py): a group whose rollouts all fail is
    rolled out again with a hint the policy wrote from the reference solution, lightest level first."""

    enabled: bool = False
    # a group is resolved when some rollout's total reward is above this
    threshold: float = 0.0
    # the sample column the hints are written from (else the reference answer)
    solution_key: str = "solution"
    # hint levels asked for (level_1 .. level_<levels>), tried in order
    levels: int = 3
    # replies sampled per hint request; the first that parses is used
    attempts: int = 3
    max_hint_tokens: int = 256  # length limit of a hint reply
    max_hint_chars: int = 2_000  # a hint's first characters that go into the prompt
    refuse_answer_leak: bool = True  # drop a hint that states a reference answer

    RANGES: ClassVar[dict[str, str]] = {
        "threshold": "(-inf, inf)",
        "levels": "[1, inf)",
        "attempts": "[1, inf)",
        "max_hint_tokens": "[1, inf)",
        "max_hint_chars": "[1, inf)",
    }


@dataclass
class TrainConfig:
    """The whole run."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rewards: list[RewardConfig] = field(default_factory=list)  # empty = the task pack's defaults
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    within_step: WithinStepConfig = field(default_factory=WithinStepConfig)  # train/within_step.py
    # the within-step methods' settings, filled from within_step.options (as blocks: deprecated aliases)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    hint: HintConfig = field(default_factory=HintConfig)
    anchor: AnchorConfig = field(default_factory=AnchorConfig)
    output_dir: str = "runs/default"
    seed: int = 0
    max_steps: int = 100
    # prompts per optimizer step per process (each gets G rollouts)
    prompts_per_step: int = 4
    # trajectories per forward/backward (gradient accumulation inside a step)
    mini_batch_size: int = 16
    # tokens per forward/backward instead (prompt + completion, real tokens not padding; train/token_budget.py):
    # unset = mini_batch_size rows. A row longer than the budget is a micro-batch of its own
    max_tokens_per_micro_batch: int | None = None
    # the update encodes each group's prompt once (see rollout/shared_prefix.py)
    shared_prefix: bool = True
    # the update's log-prob passes (policy, old, reference) run a mini-batch's rows packed into one, without
    # padding, where exact (rollout/packing.py; not Qwen3.5); where the shared prefix applies, it runs instead
    padding_free: bool = True
    # optimizer steps per batch of rollouts, each on its share of the groups (TRL's name; EasyR1 / verl:
    # rollout batch / ppo_mini_batch_size). 1 = one step on the whole batch
    steps_per_generation: int = 1
    learning_rate: float = 1e-6
    # the vision tower's (not its projector); None = learning_rate
    vision_learning_rate: float | None = None
    projector_learning_rate: float | None = None  # the vision-to-language projector's (Qwen: visual.merger)
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.99
    # torch's AdamW: one loop over tensors (foreach), or one fused kernel (on one CPU core 0.11 s against 1.4 s a
    # step for 32 M parameters; its rounding differs, so a run's trajectory does too). TRL's / transformers' names.
    optim: Literal["adamw_torch", "adamw_torch_fused"] = "adamw_torch"
    lr_scheduler_type: str = "constant"  # any transformers scheduler name
    warmup_ratio: float = 0.0
    max_grad_norm: float = 1.0
    sft_epochs: int = 1  # SFT only
    logging_steps: int = 1
    # write sampled completions with rewards every N steps (0 = never)
    log_completions_steps: int = 10
    save_steps: int = 50  # 0 = only at the end
    save_total_limit: int = 2
    resume: str | None = None  # auto | a checkpoint path
    # start a new run over a non-empty output_dir (TRL's name; mmreason.rundir)
    overwrite_output_dir: bool = False
    # run the eval harness on the task's eval split every N steps (0 = never); unset: every
    # health.reward_hacking.eval_steps when that alarm is on, the run is at least its window long and the pack
    # has an eval split (the alarm reads the held-out metric), else never
    eval_steps: int | None = None
    eval_limit: int | None = None
    # broken media samples skipped before the run stops (after a checkpoint)
    max_bad_samples: int = 20
    max_reward_errors: int = 50
    reward_timeout_s: float = 30.0
    reward_on_error: RewardOnError = "none"
    reward_missing: RewardMissing = "zero"  # what a reward that does not apply (None) counts as
    report_to: list[str] = field(default_factory=list)  # tensorboard | wandb, through accelerate trackers
    health: HealthConfig = field(default_factory=HealthConfig)  # run-health alarms (docs/health.md)
    # torch CPU threads; unset: cores / processes on this machine when launched
    num_threads: int | None = None

    RANGES: ClassVar[dict[str, str]] = {
        "seed": "[0, 4294967295]",
        "max_steps": "[0, inf)",
        "prompts_per_step": "[1, inf)",
        "mini_batch_size": "[1, inf)",
        "max_tokens_per_micro_batch": "[1, inf)",
        "steps_per_generation": "[1, inf)",
        "learning_rate": "[0, inf)",
        "vision_learning_rate": "[0, inf)",
        "projector_learning_rate": "[0, inf)",
        "weight_decay": "[0, inf)",
        "adam_beta1": "[0, 1)",
        "adam_beta2": "[0, 1)",
        "warmup_ratio": "[0, 1]",
        "max_grad_norm": "(0, inf)",
        "sft_epochs": "[1, inf)",
        "logging_steps": "[1, inf)",
        "log_completions_steps": "[0, inf)",
        "save_steps": "[0, inf)",
        "save_total_limit": "[1, inf)",
        "eval_steps": "[0, inf)",
        "eval_limit": "[1, inf)",
        "max_bad_samples": "[0, inf)",
        "max_reward_errors": "[0, inf)",
        "reward_timeout_s": "(0, inf)",
        "num_threads": "[1, inf)",
    }

    def validate(self) -> None:
        if self.rollout.num_generations < 1:
            raise ConfigError("rollout.num_generations must be >= 1")
        if self.rollout.env_step_timeout_s is not None and not self.rollout.env_step_timeout_s > 0:
            raise ConfigError("rollout.env_step_timeout_s must be positive or null (no limit)")
        if self.rollout.environment and self.rollout.max_turns < 2:
            raise ConfigError("rollout.environment needs rollout.max_turns >= 2 (a tool call, then the answer)")
        if self.rollout.environment_args and not self.rollout.environment:
            raise ConfigError("rollout.environment_args is set but rollout.environment names no environment")
        if self.steps_per_generation < 1:
            raise ConfigError("steps_per_generation must be >= 1")
        resolve_within_step(self)  # within_step: {name, options}, or an old block read as it
        if self.hint.enabled and (self.hint.levels < 1 or self.hint.attempts < 1 or self.hint.max_hint_tokens < 1):
            raise ConfigError("hint.levels, hint.attempts and hint.max_hint_tokens must be >= 1")
        if self.anchor.source == "reflect" and "{draft}" not in self.anchor.reflect_template:
            raise ConfigError("anchor.reflect_template must contain {draft}")
        if self.refine.enabled and "{draft}" not in self.refine.template:
            raise ConfigError("refine.template must contain {draft}")
        check_output_dir(self.output_dir)


def check_output_dir(path: str) -> None:
    """Refuse an ``output_dir`` that is empty, the filesystem root or the home directory: a run writes, and prunes old
    checkpoints, inside it."""
    resolved = os.path.realpath(os.path.expanduser(path)) if path.strip() else ""
    if resolved in ("", os.path.realpath(os.sep), os.path.realpath(os.path.expanduser("~"))):
        raise ConfigError(
            f"output_dir: {path!r} is empty, the filesystem root or the home directory; "
            "give a run directory such as runs/NAME"
        )


# ---- start-up checks of the algorithm options ------------------------------------------------------------

# Top-level algorithm keys (TRL's names) the trainer hands a policy loss as LossInputs fields of the same name.
# beta and kl_estimator reach every loss (the shared KL term); epsilon, epsilon_high and importance_sampling_level
# only the losses that declare they read them: set away from its default for a loss that does not, one is an
# error at start-up, never silently dropped.
NAMED_LOSS_OPTIONS = ("epsilon", "epsilon_high", "importance_sampling_level", "beta", "kl_estimator")


def check_algorithm_options(cfg: TrainConfig, config_dir: str | None = None) -> None:
    """Check at start-up that every option reaches the component it names, or the run does not start.

    ``algorithm.estimator_options`` / ``algorithm.loss_options`` must be options the chosen estimator / loss
    takes; a top-level key (``scale_rewards``, ``epsilon``, ``epsilon_high`` ...) set away from its default
    must be taken by the chosen component; ``reward_missing: renormalize`` needs an estimator of the weighted
    total. Errors name the option and the component's valid options.
    """
    a, default = cfg.algorithm, AlgorithmConfig()
    estimator = rl.ESTIMATORS.get(a.estimator, config_dir)
    loss = rl.POLICY_LOSSES.get(a.policy_loss, config_dir)
    supplied = {"task_ids", "missing", *rl.needs_of(estimator)}  # the trainer passes these itself
    for key in a.estimator_options:
        if key in supplied or key == "scale_rewards":
            raise ConfigError(
                f"algorithm.estimator_options.{key}: set by the trainer"
                + (" (use algorithm.scale_rewards)" if key == "scale_rewards" else "")
            )
    present = {k: None for k in supplied | {"scale_rewards"} if k in accepted_options(estimator)}
    try:  # what the trainer supplies counts as present
        check_options("estimator", a.estimator, estimator, {**present, **a.estimator_options})
    except TypeError as exc:
        raise ConfigError(f"algorithm.estimator_options: {exc}") from None
    if a.scale_rewards != default.scale_rewards and "scale_rewards" not in accepted_options(estimator):
        valid = [k for k in keyword_options(estimator) if k not in supplied]
        raise ConfigError(
            f"algorithm.scale_rewards={a.scale_rewards!r}: estimator {a.estimator!r} takes no "
            f"scale_rewards; its options: {', '.join(valid) or '(none)'}"
        )
    for key in a.loss_options:
        if key in NAMED_LOSS_OPTIONS or key in FIELDS:  # what the trainer hands a loss: not options
            raise ConfigError(
                f"algorithm.loss_options.{key}: "
                + (f"set it as algorithm.{key}" if key in NAMED_LOSS_OPTIONS else "set by the trainer")
            )
    # the loss's options are its keyword-only parameters; LossInputs fields are not options
    try:
        check_options("policy loss", a.policy_loss, loss, a.loss_options, exclude=FIELDS)
        check_choices("policy loss", a.policy_loss, choices_of(loss), a.loss_options)  # Literal-typed options
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"algorithm.loss_options: {exc}") from None
    reads = rl.contract_of(loss).takes
    for key in NAMED_LOSS_OPTIONS:
        if key not in reads and getattr(a, key) != getattr(default, key):
            raise ConfigError(
                f"algorithm.{key}={getattr(a, key)!r}: policy loss {a.policy_loss!r} takes no {key}; "
                f"its options: {', '.join(rl.options_of(loss)) or '(none)'}"
            )
    check_reward_missing(cfg)


def check_reward_missing(cfg: TrainConfig) -> None:
    """Check that ``reward_missing: renormalize`` has an estimator of the weighted total (it takes ``missing``)."""
    fn = rl.ESTIMATORS.get(cfg.algorithm.estimator)
    if cfg.reward_missing != "zero" and "missing" not in accepted_options(fn):
        raise ValueError(
            f"reward_missing={cfg.reward_missing!r}: estimator {cfg.algorithm.estimator!r} normalises "
            "each reward component on its own and has no weighted total to renormalise; use "
            "reward_missing=zero with it (a component that does not apply is already left out)"
        )


def accepted_options(fn: Callable[..., Any]) -> set[str]:
    """Return the keyword options a registered function takes (so shared settings reach only those that use them)."""
    params = inspect.signature(fn).parameters.values()
    return {p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
