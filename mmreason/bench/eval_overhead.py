"""`mmreason bench eval-overhead`: the harness against a bare batched ``generate`` loop on the same batches.

Both sides get the same docs in the same batches (the harness's length-sorted plan), the same model,
greedy decoding, the same ``max_new_tokens``, EOS ids and suppressed vision tokens. The bare loop is
what one writes by hand: chat template -> ``processor(text=[...], images=[...], padding=True)`` ->
``model.generate`` -> ``batch_decode``. The harness adds media loading under budgets, per-doc prompt
building and collation, metrics, the samples journal and the results files. Model loading is outside
both timings. Overhead = (harness - bare) / bare; the target is <= 10 %. Each side runs ``repeats``
times after one warm-up batch; the fastest repeat counts (the least disturbed by other load).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from mmreason.eval.config import ModelArgs
from mmreason.eval.model import default_device, load_for_eval, resolve_model
from mmreason.eval.output import RunFiles, package_versions
from mmreason.eval.report import build_results, markdown_table
from mmreason.eval.scoring import ScoringOptions, estimate_length, plan_batches, score_task
from mmreason.eval.tasks import EvalTask, load_task
from mmreason.models.loading import DType
from mmreason.models.tiny import build_tiny_model
from mmreason.rollout.generate import GenerationSettings, eos_token_ids, suppressed_token_ids
from mmreason.rollout.prompts import render_chat

if TYPE_CHECKING:
    from transformers import ProcessorMixin


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def harness_pass(
    model: torch.nn.Module, processor: ProcessorMixin, task: EvalTask, opts: ScoringOptions, out_dir: Path
) -> tuple[float, list[str]]:
    """The harness minus model loading: plan, prompts, generate, metrics, journal, results files."""
    start = time.perf_counter()
    files = RunFiles.open(out_dir, "bench", {"t": time.time_ns()})
    records = score_task(model, processor, task, opts, on_batch=lambda rows: files.append(task.file_name, rows))
    results = build_results(
        [task], {task.file_name: records}, {}, model_name="bench", stamp=files.stamp, digest="", versions={}
    )
    files.finish(results, markdown_table(results), {task.file_name: records}, log_samples=True)
    return time.perf_counter() - start, [r.get("response", "") for r in records]


def bare_pass(
    model: Any, processor: ProcessorMixin, task: EvalTask, batches: list[list[int]], max_new_tokens: int
) -> tuple[float, list[str]]:
    """Hand-written batched generation over the same batches (images by path or PIL only)."""
    from PIL import Image

    tok, device = processor.tokenizer, next(model.parameters()).device
    texts_out: dict[int, str] = {}
    start = time.perf_counter()
    for batch in batches:
        samples = [task.samples[i] for i in batch]
        texts = [render_chat(processor, s.messages) for s in samples]
        images = [
            im if isinstance(im, Image.Image) else Image.open(im).convert("RGB") for s in samples for im in s.images
        ]
        inputs = processor(text=texts, images=images or None, padding=True, return_tensors="pt").to(device)
        with torch.no_grad():
            out = model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                num_beams=1,
                eos_token_id=eos_token_ids(tok),
                pad_token_id=tok.pad_token_id,
                suppress_tokens=suppressed_token_ids(tok),
            )
        decoded = processor.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        texts_out.update(zip(batch, decoded))
    return time.perf_counter() - start, [texts_out[i] for i in range(len(task.samples))]


def bench_eval_overhead(
    model: str | None = None,
    task: str = "shapes",
    n: int = 64,
    batch_size: int = 16,
    max_new_tokens: int = 64,
    *,
    repeats: int = 3,
    device: str | None = None,
    dtype: DType = "auto",
) -> dict[str, Any]:
    """Seconds for the harness and for bare generate on the same batches, and the overhead in %."""
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model
        if model_dir is None:
            model_dir = str(build_tiny_model(Path(tmp) / "tiny", seed=0))
        device = default_device(device)
        the_task = load_task(task, None, n)
        if any(s.videos or s.pages for s in the_task.samples):
            raise ValueError(f"bench eval-overhead: task {task!r} has videos or pages; the bare loop takes images only")
        lm, processor = load_for_eval(resolve_model(model_dir), ModelArgs(dtype=dtype), device)
        assert lm is not None  # with_model: loaded
        opts = ScoringOptions(GenerationSettings(max_new_tokens, temperature=0.0), batch_size=batch_size)
        batches = plan_batches([estimate_length(processor, s, opts.prompt) for s in the_task.samples], batch_size)
        warm = EvalTask(
            "warmup",
            the_task.pack,
            None,
            the_task.samples[:batch_size],
            batch_size,
            the_task.extract_answer,
            the_task.extractor_name,
        )
        harness_pass(lm, processor, warm, opts, Path(tmp) / "warm")
        bare_pass(lm, processor, warm, [list(range(len(warm.samples)))], max_new_tokens)
        harness_times, bare_times = [], []
        for r in range(repeats):
            _sync(device)
            t, harness_texts = harness_pass(lm, processor, the_task, opts, Path(tmp) / f"run{r}")
            harness_times.append(t)
            _sync(device)
            t, bare_texts = bare_pass(lm, processor, the_task, batches, max_new_tokens)
            bare_times.append(t)
    harness_s, bare_s = min(harness_times), min(bare_times)
    return {
        "task": task,
        "n": len(the_task.samples),
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens,
        "model": model or "tiny (built)",
        "device": device,
        "dtype": dtype,
        "repeats": repeats,
        "harness_s": round(harness_s, 4),
        "bare_s": round(bare_s, 4),
        "overhead_pct": round(100.0 * (harness_s - bare_s) / bare_s, 2),
        "same_outputs": harness_texts == bare_texts,
        "versions": package_versions(),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=None, help="model directory (default: build the tiny model)")
    parser.add_argument("--task", default="shapes", help="an image task pack")
    parser.add_argument("--n", type=int, default=64, help="docs")
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="auto")


def run(args: argparse.Namespace) -> int:
    import json

    result = bench_eval_overhead(
        args.model,
        args.task,
        args.n,
        args.batch_size,
        args.max_new_tokens,
        repeats=args.repeats,
        device=args.device,
        dtype=args.dtype,
    )
    print(json.dumps(result, indent=2))
    return 0
