"""One task through the flow: docs -> prompts -> batched generation -> metrics -> per-doc records.

Docs are sorted by their estimated prompt length (longest first, as lmms-eval's collator does, so an
out-of-memory batch shows up at once) and cut into fixed batches. The batches are a function of the
docs alone, so a resumed run regenerates exactly the batches an uninterrupted run generates: a batch
whose docs are all in the samples file is skipped, any other is generated whole. A doc whose media is
missing or corrupt (or whose prompt exceeds max_prompt_length) becomes a failure record; the run goes on.
A pack with an environment and an episode length above 1 runs each doc as one episode in it (``episodes.py``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mmreason import media
from mmreason.eval.episodes import episode_turns, run_episode_docs
from mmreason.eval.generate import Completion, generate_batch
from mmreason.eval.prompts import PromptOptions, encode_batch
from mmreason.eval.tasks import EvalTask
from mmreason.media import MediaError
from mmreason.rollout.generate import GenerationSettings, group_seed
from mmreason.rollout.prompts import PromptInputs, PromptTooLong
from mmreason.rollout.visibility import media_paths
from mmreason.types import Sample

if TYPE_CHECKING:
    from tqdm import tqdm
    from transformers import ProcessorMixin

# What a broken doc raises while its prompt is built: anything (a row's value of an unexpected type fails inside a
# library with a TypeError as well as a ValueError); it fails that doc alone, counted, as the trainer skips it.
SAMPLE_ERRORS = (MediaError, PromptTooLong, Exception)

log = logging.getLogger("mmreason.eval")


@dataclass
class ScoringOptions:
    settings: GenerationSettings
    prompt: PromptOptions = field(default_factory=PromptOptions)
    batch_size: int = 1
    seed: int = 0
    max_turns: int | None = None  # episode length for packs with an environment; None = the pack's own


# ---- ordering ----------------------------------------------------------------------------------


def estimate_length(processor: ProcessorMixin, sample: Sample, opts: PromptOptions) -> int:
    """Prompt tokens (text + visual) estimated from text length and media headers, decoding no pixels.

    Used only to order docs; a doc whose media cannot be read estimates its text alone (it fails later,
    when its prompt is built).
    """
    total = _text_chars(sample.messages, opts.system_prompt) // 4  # ~4 characters per token: order only
    size = processor.image_processor.size
    lo = opts.min_pixels or size.get("shortest_edge") or media.IMAGE_MIN_PIXELS
    hi = opts.max_pixels or size.get("longest_edge") or media.IMAGE_MAX_PIXELS
    try:
        total += sum(media.image_file_tokens(src, lo, hi) for src in sample.images)
        by_pdf: dict[str, list] = {}
        for page in sample.pages:  # one open per PDF, not per page: documents run to hundreds of pages
            by_pdf.setdefault(page.source, []).append(page)
        for source, pages in by_pdf.items():
            sizes = media.pdf_page_sizes(source, [p.index for p in pages])
            total += sum(media.image_tokens(h, w, lo, min(p.max_pixels or hi, hi)) for (h, w), p in zip(sizes, pages))
        for ref in sample.videos:
            total += media.video_clip_tokens(
                ref.path,
                fps=ref.fps or (None if ref.num_frames else opts.video_fps),
                num_frames=ref.num_frames,
                start=ref.start,
                end=ref.end,
                max_frames=opts.video_max_frames,
            )
    except SAMPLE_ERRORS:
        pass
    return total


def _text_chars(messages: list[dict[str, Any]], system_prompt: str | None) -> int:
    chars = len(system_prompt or "")
    for message in messages:
        content = message.get("content")
        items = [content] if isinstance(content, str) else [i.get("text", "") for i in content or []]
        chars += sum(len(str(i or "")) for i in items)
    return chars


def plan_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Doc indices, longest first (ties in doc order), cut into batches of ``batch_size``."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


# ---- one batch ---------------------------------------------------------------------------------

# A batch's prompts built ahead: (doc index, prompt) of the docs that built, failure records of the rest.
Prepared = tuple[list[tuple[int, PromptInputs]], list[dict[str, Any]]]


def build_prompts(processor: ProcessorMixin, task: EvalTask, indices: list[int], opts: PromptOptions) -> Prepared:
    """Prompts of the docs that build (one processor call per batch), failure records for the rest."""
    built, failed = [], []
    samples = [task.samples[i] for i in indices]
    for index, result in zip(indices, encode_batch(processor, samples, opts, SAMPLE_ERRORS)):
        if isinstance(result, BaseException):
            sample = task.samples[index]
            failed.append(
                {
                    "doc_id": sample.id,
                    "doc_index": index,
                    "target": _jsonable(sample.answer),
                    "error": f"{type(result).__name__}: {result}",
                }
            )
        else:
            built.append((index, result))
    return built, failed


def metric_scores(task: EvalTask, sample: Sample, text: str) -> tuple[dict[str, float | None], dict[str, str]]:
    """(metric -> score, None where it does not apply; metric -> error of the metrics that raised)."""
    scores, metric_errors = {}, {}
    for name, fn in task.metrics.items():
        try:
            value = float(fn(sample, text))
        except Exception as exc:  # isolated like a reward: this doc's metric fails, counted; the run goes on
            metric_errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.warning("task %r: metric %r failed on doc %r: %s", task.name, name, sample.id, metric_errors[name])
            value = math.nan
        scores[name] = None if math.isnan(value) else value
    return scores, metric_errors


def score_record(
    task: EvalTask, index: int, prompt: PromptInputs, completion: Completion, extra_fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The samples-file line of one doc: prompt, target, raw response, parsed answer, per-metric scores."""
    sample = task.samples[index]
    scores, metric_errors = metric_scores(task, sample, completion.text)
    extra: dict[str, Any] = {"metric_errors": metric_errors} if metric_errors else {}
    if prompt.video_frames:  # which frames the model saw: seconds from the start of each video
        extra["video_frames"] = prompt.video_frames
    return {
        "doc_id": sample.id,
        "doc_index": index,
        "prompt": prompt.text,
        "target": _jsonable(sample.answer),
        "response": completion.text,
        "parsed_answer": task.extract_answer(completion.text),
        "scores": scores,
        "prompt_tokens": prompt.length,
        "visual_tokens": prompt.visual_tokens,
        "completion_tokens": int(completion.token_ids.numel()),
        "truncated": completion.truncated,
        "media": media_paths(sample),
        **extra,
        **(extra_fields or {}),
    }


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, list, dict, type(None))) else str(value)


def run_batch(
    model: Any,
    processor: ProcessorMixin,
    task: EvalTask,
    indices: list[int],
    opts: ScoringOptions,
    *,
    prepared: Prepared | None = None,
    lock: threading.Lock | None = None,
) -> list[dict[str, Any]]:
    """Records of one batch; ``prepared`` = its (built prompts, failure records) when built ahead."""
    built, records = prepared or build_prompts(processor, task, indices, opts.prompt)
    turns = episode_turns(task, opts.max_turns)
    if built and turns > 1:  # one episode per doc in the task's environment, the batch's played together
        with lock or contextlib.nullcontext():
            played = run_episode_docs(
                model,
                processor,
                [p for _, p in built],
                task,
                opts.settings,
                max_turns=turns,
                max_prompt_length=opts.prompt.max_prompt_length,
                seed=opts.seed,
                image_budget=(opts.prompt.min_pixels, opts.prompt.max_pixels),
            )
        for (i, p), result in zip(built, played):
            if isinstance(result, Exception):  # a failed doc, like one whose media cannot be read
                records = records + [
                    {
                        "doc_id": p.sample.id,
                        "doc_index": i,
                        "target": _jsonable(p.sample.answer),
                        "error": f"{type(result).__name__}: {result}",
                    }
                ]
            else:
                records = records + [score_record(task, i, p, *result)]
    elif built:
        prompts = [p for _, p in built]
        seeds = [group_seed(opts.seed, 0, p.sample.id) for p in prompts]
        completions = generate_batch(model, processor, prompts, opts.settings, seeds, lock=lock)
        records = records + [score_record(task, i, p, c) for (i, p), c in zip(built, completions)]
    return records


def _prefetched(
    processor: ProcessorMixin, task: EvalTask, batches: list[list[int]], opts: PromptOptions, lock: threading.Lock
) -> Iterator[tuple[list[int], Prepared]]:
    """(batch, its prompts) in order; batch k+1's media are loaded while batch k generates.

    Loading and processing media is CPU work that a bare loop does between generate calls; a worker
    thread does it during them. The processor's tokenizer is not safe to use from two threads at
    once, so prompt building and decoding share ``lock``.
    """

    def build(batch: list[int]) -> Prepared:
        with lock:
            return build_prompts(processor, task, batch, opts)

    if not batches:
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(build, batches[0])
        for k, batch in enumerate(batches):
            prepared = future.result()
            if k + 1 < len(batches):
                future = pool.submit(build, batches[k + 1])
            yield batch, prepared


# ---- one task ----------------------------------------------------------------------------------


def score_task(
    model: Any,
    processor: ProcessorMixin,
    task: EvalTask,
    opts: ScoringOptions,
    done: dict[str, dict] | None = None,
    *,
    on_batch: Callable[[list[dict]], None] | None = None,
    progress: tqdm | None = None,
) -> list[dict[str, Any]]:
    """Records of every doc of ``task`` in doc order; docs in ``done`` keep their stored records.

    ``on_batch`` receives each batch's new records (the samples-file journal appends them);
    ``progress`` is a tqdm-like bar advanced by docs.
    """
    done = dict(done or {})
    lengths = [estimate_length(processor, s, opts.prompt) for s in task.samples]
    todo = []
    for batch in plan_batches(lengths, opts.batch_size):
        if all(task.samples[i].id in done for i in batch):
            if progress is not None:
                progress.update(len(batch))
        else:
            todo.append(batch)
    lock = threading.Lock()
    for batch, prepared in _prefetched(processor, task, todo, opts.prompt, lock):
        new = [
            r
            for r in run_batch(model, processor, task, batch, opts, prepared=prepared, lock=lock)
            if r["doc_id"] not in done
        ]
        if on_batch is not None:
            on_batch(new)
        done.update((r["doc_id"], r) for r in new)
        if progress is not None:
            progress.update(len(batch))
    return [done[s.id] for s in task.samples]
