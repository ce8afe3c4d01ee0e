"""The settings of one `mmreason eval` run, in lmms-eval's vocabulary, every default in one typed place.

``--model_args`` and ``--gen_kwargs`` are lmms-eval's comma-separated ``key=value`` strings; they are
parsed into the dataclasses below, so an unknown key is an error naming it and the closest valid key,
and a value of the wrong type is an error naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mmreason.config import ConfigError, build, check_ranges, parse_override
from mmreason.media.limits import MediaLimits
from mmreason.models.loading import AttnImplementation, DType
from mmreason.rollout.backends.connection import RolloutBackend, VllmConnection, VllmMode

# The split name the harness asks a task pack for (``TaskPack.load(path, EVAL_SPLIT, ...)``).
EVAL_SPLIT = "eval"


@dataclass
class ModelArgs(MediaLimits, VllmConnection):
    """``--model_args``: how the model is loaded and how its inputs are built (each can move a score).

    The media and prompt limits are ``MediaLimits``' (mmreason/media/limits.py) and the server's address and
    timeouts ``VllmConnection``'s (mmreason/rollout/backends/connection.py): the same names as a run config's
    ``data.*`` and ``rollout.*``. A prompt over ``max_prompt_length`` is a failed sample, never cut."""

    attn_implementation: AttnImplementation = "auto"
    dtype: DType = "auto"
    adapter: str | None = None  # a LoRA adapter directory loaded (and merged) on top of --model
    backend: RolloutBackend = "hf"  # what generates (vllm: a vLLM engine on the same prompts, docs/vllm.md)
    vllm_mode: VllmMode = "colocate"  # backend=vllm only

    def validate(self) -> None:
        if self.vllm_mode == "server" and self.backend != "vllm":
            raise ConfigError("model_args.vllm_mode=server needs backend=vllm")


@dataclass
class GenKwargs:
    """``--gen_kwargs``. The model's own generation_config sampling defaults are not used: only these."""

    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int | None = None
    do_sample: bool | None = None  # lmms-eval's flag: false forces greedy; true needs temperature > 0
    max_turns: int | None = None  # assistant turns of an episode in a pack's environment; None = the pack's own

    RANGES: ClassVar[dict[str, str]] = {
        "max_new_tokens": "[1, inf)",
        "temperature": "[0, inf)",
        "top_p": "(0, 1]",
        "top_k": "[1, inf)",
        "max_turns": "[1, inf)",
    }

    def validate(self) -> None:
        if self.do_sample is False:
            self.temperature = 0.0
        if self.do_sample and self.temperature <= 0:
            raise ConfigError("gen_kwargs: do_sample=true needs temperature > 0")


@dataclass
class EvalConfig:
    """One evaluation run: a model, task specs (``name`` or ``PACK:PATH``) and how to run them."""

    model: str
    tasks: list[str]
    batch_size: int = 1
    output_path: str = "eval_results"
    log_samples: bool = False
    limit: float | None = None  # first N docs of each task; a value < 1 is a fraction (as lmms-eval)
    gen_kwargs: GenKwargs = field(default_factory=GenKwargs)
    model_args: ModelArgs = field(default_factory=ModelArgs)
    seed: int = 0
    device: str | None = None  # None = cuda when available, else cpu
    task_args: dict[str, Any] = field(default_factory=dict)  # passed to every task's loader (as data.task_args)
    environment: str | None = None  # --environment: a user's environment on every task (rollout.environment)
    environment_args: dict[str, Any] = field(default_factory=dict)  # --environment_args, as rollout.environment_args

    RANGES: ClassVar[dict[str, str]] = {"batch_size": "[1, inf)", "limit": "(0, inf)", "seed": "[0, 4294967295]"}

    def validate(self) -> None:
        try:
            check_ranges(self)
        except ConfigError as exc:
            raise ConfigError(f"--{exc}") from None
        if not self.tasks:
            raise ConfigError("--tasks is empty")
        if self.environment_args and not self.environment:
            raise ConfigError("--environment_args is set but --environment names no environment")
        try:  # a malformed spec ("videoqa:" with no path) stops the run before the model loads
            parse_task_specs(self.tasks)
        except ValueError as err:
            raise ConfigError(str(err)) from None


def parse_kv(text: str | None, flag: str) -> dict[str, Any]:
    """``"a=1,b=x"`` -> ``{"a": 1, "b": "x"}`` (values read as YAML scalars: numbers, booleans, null)."""
    out: dict[str, Any] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        try:
            path, value = parse_override(item.strip())
        except ConfigError as exc:
            raise ConfigError(f"{flag}: {exc}") from None
        if len(path) != 1:
            raise ConfigError(f"{flag}: key {'.'.join(path)!r} has a dot; give plain names like max_pixels=...")
        out[path[0]] = value
    return out


def parse_model_args(text: str | None) -> ModelArgs:
    try:
        return build(ModelArgs, parse_kv(text, "--model_args"))
    except ConfigError as exc:
        raise ConfigError(f"--model_args: {exc}") from None


def parse_gen_kwargs(text: str | None) -> GenKwargs:
    try:
        return build(GenKwargs, parse_kv(text, "--gen_kwargs"))
    except ConfigError as exc:
        raise ConfigError(f"--gen_kwargs: {exc}") from None


def resolve_limit(limit: float | None, n: int) -> int:
    """How many docs ``--limit`` keeps out of ``n`` (an int count, or a fraction when < 1)."""
    if limit is None:
        return n
    if limit < 1:
        return min(n, math.ceil(n * limit))
    return min(n, int(limit))


def parse_task_specs(text: str | list[str]) -> list[tuple[str, str | None]]:
    """``"a,b:path"`` (or a list of such strings) -> [("a", None), ("b", "path")]."""
    items = text.split(",") if isinstance(text, str) else [i for t in text for i in t.split(",")]
    specs = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        name, colon, path = item.partition(":")
        if colon and not path.strip():  # "videoqa:" with an unset $H would silently evaluate the default split
            raise ValueError(
                f"--tasks {item!r}: no data file after the colon (PACK:PATH); give a path, or "
                f"{name.strip()!r} alone for the pack's default eval split"
            )
        specs.append((name.strip(), path.strip() or None))
    if not specs:
        raise ValueError("--tasks names no task; see `mmreason list tasks`")
    return specs
