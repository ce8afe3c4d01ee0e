"""`mmreason eval`: one run reads like the flow.

    resolve --model -> load tasks -> load model and processor -> open (or resume) the run's files
    -> per task: score every doc in length-sorted batches, journaling each batch
    -> aggregate (mean, stderr, n, failures) -> results JSON, markdown table, terminal table

Everything that can move a score is in ``results["config"]`` and ``results["configs"][task]``; its
hash names the run for resume (see ``output.py``).
"""

from __future__ import annotations

import functools
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from tqdm.auto import tqdm
from transformers import AutoTokenizer, set_seed

from mmreason.config import ConfigError, to_dict
from mmreason.eval.config import EvalConfig, ModelArgs
from mmreason.eval.model import ResolvedModel, default_device, load_for_eval, resolve_model
from mmreason.eval.output import RunFiles, config_hash, elapsed_since, package_versions
from mmreason.eval.report import build_results, markdown_table, print_table
from mmreason.eval.scoring import PromptOptions, ScoringOptions, score_task
from mmreason.eval.tasks import EvalTask, load_tasks
from mmreason.media.limits import media_fields
from mmreason.media.pdf import PAGE_CACHE
from mmreason.models.families import family_of_processor
from mmreason.models.loading import cpu_attention, resolve_attn_implementation, resolve_dtype
from mmreason.rollout.backends.vllm_client import VLLMClient, check_calls, check_server
from mmreason.rollout.backends.vllm_engine import VLLMBackend, VLLMSettings, processor_kwargs
from mmreason.rollout.env_plugin import EnvironmentConfigError, EnvironmentFactory, load_environment
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.tool_calls import FORMATS

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase, ProcessorMixin


@dataclass
class EvalOutcome:
    results: dict[str, Any]
    results_path: Path
    samples_paths: dict[str, Path]  # task name -> samples file (written with --log_samples)
    resumed_docs: int  # docs taken from an earlier, interrupted run


def scoring_options(cfg: EvalConfig) -> ScoringOptions:
    g, m = cfg.gen_kwargs, cfg.model_args
    settings = GenerationSettings(g.max_new_tokens, g.temperature, g.top_p, g.top_k)
    prompt = PromptOptions(**media_fields(m))
    return ScoringOptions(settings, prompt, cfg.batch_size, cfg.seed, g.max_turns)


def run_config(
    cfg: EvalConfig, resolved: ResolvedModel, tasks: list[EvalTask], processor: ProcessorMixin, device: str
) -> dict[str, Any]:
    """The settings that move a score (hashed for resume), as the results file records them."""
    image = processor.image_processor.size
    video = getattr(processor, "video_processor", None)
    return {
        "model": resolved.describe(),
        "model_args": to_dict(cfg.model_args),  # its vllm_server_api_key blanked: a secret is never saved
        "dtype": str(resolve_dtype(cfg.model_args.dtype)).removeprefix("torch."),
        "attn_implementation": cpu_attention(
            resolve_attn_implementation(cfg.model_args.attn_implementation, resolve_dtype(cfg.model_args.dtype)),
            resolve_dtype(cfg.model_args.dtype),
        ),
        "image_pixels": {
            "min": cfg.model_args.min_pixels or image.get("shortest_edge"),
            "max": cfg.model_args.max_pixels or image.get("longest_edge"),
        },
        "video_pixels": (
            {"min": video.size.get("shortest_edge"), "max": video.size.get("longest_edge")}
            if video is not None
            else None
        ),
        "video_frames": {"fps": cfg.model_args.video_fps, "max_frames": cfg.model_args.video_max_frames},
        "gen_kwargs": asdict(cfg.gen_kwargs),
        "decoding": "greedy" if cfg.gen_kwargs.temperature == 0 else "sampling, seeded per doc",
        "chat_template_hash": config_hash({"t": getattr(processor, "chat_template", None)}),
        "tasks": [t.name for t in tasks],
        "task_args": cfg.task_args,
        **({"environment": cfg.environment, "environment_args": cfg.environment_args} if cfg.environment else {}),
        "docs_hash": {t.name: t.docs_hash() for t in tasks},
        "limit": cfg.limit,
        "batch_size": cfg.batch_size,
        "seed": cfg.seed,
        "device": device,
    }


def _tokenizer(resolved: ResolvedModel) -> PreTrainedTokenizerBase | None:
    """The model's tokenizer (None if it cannot be loaded alone: packs then over-count the text)."""
    try:
        return AutoTokenizer.from_pretrained(str(resolved.processor_dir))
    except Exception:  # the processor load below reports a broken checkpoint properly
        return None


def resource_use() -> dict[str, Any]:
    """What the run cost the process: peak resident memory and the PDF layer's counts (documents opened,
    pages rendered, pages served from the in-memory / on-disk cache)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return {
        "peak_rss_mb": round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1),
        **{f"pdf_{k}": v for k, v in PAGE_CACHE.stats.items()},
    }


def evaluate(cfg: EvalConfig, console: Console | None = None, progress: bool = True) -> EvalOutcome:
    """Run every task of ``cfg``; returns the results and where they were written."""
    console = console or Console()
    resolved = resolve_model(cfg.model, cfg.model_args.adapter)
    tokenizer = _tokenizer(resolved)  # counts prompt text for packs that fit page budgets to the prompt length
    environment = eval_environment(cfg)  # --environment, built once: a wrong reference fails before the model
    tasks = load_tasks(
        cfg.tasks,
        cfg.limit,
        cfg.task_args,
        cfg.seed,  # before the model: a typo fails at once
        cfg.model_args.max_prompt_length,
        tokenizer=tokenizer,
        environment=environment,
        max_turns=cfg.gen_kwargs.max_turns,
    )
    device = default_device(cfg.device)
    set_seed(cfg.seed)
    colocated = cfg.model_args.backend == "vllm" and cfg.model_args.vllm_mode != "server"
    # a colocated engine loads the weights itself: the HF model is never built (server mode pushes it)
    hf_model, processor = load_for_eval(resolved, cfg.model_args, device, with_model=not colocated)
    if environment is not None:  # its tool calls read in the model family's format
        environment.call_format = FORMATS[family_of_processor(processor).tool_calls]
    model: torch.nn.Module | VLLMClient | VLLMBackend | None = hf_model
    if cfg.model_args.backend == "vllm" and cfg.model_args.vllm_mode == "server":
        assert hf_model is not None  # loaded: server mode pushes its weights
        model = vllm_server_for_eval(cfg, hf_model, processor)
    elif cfg.model_args.backend == "vllm":
        model = vllm_engine_for_eval(resolved, cfg.model_args, processor)
    try:
        return _evaluate_tasks(cfg, console, progress, resolved, tasks, device=device, model=model, processor=processor)
    finally:
        if isinstance(model, (VLLMClient, VLLMBackend)):
            model.close()


def eval_environment(cfg: EvalConfig) -> EnvironmentFactory | None:
    """The factory ``--environment`` names (None without one); a wrong one is a ConfigError naming the flag."""
    if not cfg.environment:
        return None
    try:
        return load_environment(cfg.environment, cfg.environment_args, key="--environment")
    except EnvironmentConfigError as exc:
        raise ConfigError(str(exc)) from None


def vllm_engine_for_eval(resolved: ResolvedModel, args: ModelArgs, processor: ProcessorMixin) -> VLLMBackend:
    """A vLLM engine on ``--model``'s weights (``--model_args backend=vllm``)."""
    if resolved.adapter is not None:
        raise ValueError(
            f"--model_args backend=vllm: {resolved.spec!r} is a LoRA adapter; merge it first "
            "(or evaluate with backend=hf)"
        )
    settings = VLLMSettings(
        seed=0,
        processor_kwargs=processor_kwargs(args.min_pixels, args.max_pixels),
        generate_timeout=args.vllm_generate_timeout,
        dtype=None if args.dtype == "auto" else str(resolve_dtype(args.dtype)).removeprefix("torch."),
        weight_sync="directory",
    )  # it keeps the weights it loaded: no weights group
    return VLLMBackend(resolved.weights, processor.tokenizer, settings)


def vllm_server_for_eval(cfg: EvalConfig, model: torch.nn.Module, processor: ProcessorMixin) -> VLLMClient:
    """A client of the ``mmreason vllm-serve`` at ``vllm_server_host:vllm_server_port``
    (``--model_args backend=vllm,vllm_mode=server``), holding ``--model``'s weights: the loaded model (a LoRA
    adapter merged in) is pushed to the server first, since a server may hold any weights of the same model.
    Before any doc: an error naming host:port when nobody answers, when the server's context is shorter than
    ``max_prompt_length + max_new_tokens`` or its pixel limits differ from ``min_pixels``/``max_pixels``."""
    args = cfg.model_args
    host, port = args.vllm_server_host, args.vllm_server_port
    client = VLLMClient(
        host,
        port,
        processor.tokenizer,
        api_key=args.vllm_server_api_key,
        server_timeout=args.vllm_server_timeout,
        generate_timeout=args.vllm_generate_timeout,
    )
    try:
        check_server(
            client.info,
            host,
            port,
            args.max_prompt_length + cfg.gen_kwargs.max_new_tokens,
            processor_kwargs(args.min_pixels, args.max_pixels),
            what="model_args.max_prompt_length + "
            "gen_kwargs.max_new_tokens; lower max_prompt_length: longer prompts are failed docs",
        )
        check_calls(
            client.info,
            host,
            port,
            prompts=cfg.batch_size,
            n=1,
            max_new_tokens=cfg.gen_kwargs.max_new_tokens,
            names=("--batch_size", "rows per doc", "gen_kwargs.max_new_tokens"),
        )
        client.sync_weights(model)
    except BaseException:
        client.close()
        raise
    return client


def _evaluate_tasks(
    cfg: EvalConfig,
    console: Console,
    progress: bool,
    resolved: ResolvedModel,
    tasks: list[EvalTask],
    *,
    device: str,
    model: Any,
    processor: ProcessorMixin,
) -> EvalOutcome:
    config = run_config(cfg, resolved, tasks, processor, device)
    files = RunFiles.open(cfg.output_path, resolved.name, config, lock=True)  # one evaluation writes a run
    try:
        return _write_run(
            cfg, console, progress, resolved, tasks, model=model, processor=processor, config=config, files=files
        )
    finally:
        files.close()


def _write_run(
    cfg: EvalConfig,
    console: Console,
    progress: bool,
    resolved: ResolvedModel,
    tasks: list[EvalTask],
    *,
    model: Any,
    processor: ProcessorMixin,
    config: dict[str, Any],
    files: RunFiles,
) -> EvalOutcome:
    opts = scoring_options(cfg)
    start, records, resumed = time.perf_counter(), {}, 0
    for task in tasks:
        ids = {s.id for s in task.samples}
        done = {k: v for k, v in files.read_journal(task.file_name).items() if k in ids} if files.resumed else {}
        resumed += len(done)
        if done:
            console.print(f"{task.name}: resuming {files.stamp}, {len(done)} of {len(task.samples)} docs done")
        bar = tqdm(total=len(task.samples), desc=task.name, disable=not progress, dynamic_ncols=True)
        with bar:
            records[task.file_name] = score_task(
                model,
                processor,
                task,
                opts,
                done,
                on_batch=functools.partial(files.append, task.file_name),
                progress=bar,
            )
    results = build_results(
        tasks,
        records,
        config,
        model_name=resolved.name,
        stamp=files.stamp,
        digest=config_hash(config),
        versions=package_versions(),
        seconds=elapsed_since(start),
    )
    results["resources"] = resource_use()
    files.finish(results, markdown_table(results), records, cfg.log_samples)
    print_table(results, console)
    console.print(f"results: {files.results_path}", soft_wrap=True)
    samples = {t.name: files.samples_path(t.file_name) for t in tasks} if cfg.log_samples else {}
    return EvalOutcome(results, files.results_path, samples, resumed)
