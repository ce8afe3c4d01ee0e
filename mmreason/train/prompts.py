"""Prompt loading shared by SFT and GRPO: a dataset row as model inputs for this draw, or None (counted and
logged) when it cannot be; over-long prompts are filtered, broken media counted against ``max_bad_samples``."""

from __future__ import annotations

import json
from pathlib import Path

from mmreason.parallel.agree import hold, stopping
from mmreason.rollout.prompts import PromptInputs, PromptTooLong, build_prompt
from mmreason.rollout.visibility import UnseenMedia
from mmreason.sampling.records import Drawn
from mmreason.train.faults import RunStopped, bad_sample, say_skip
from mmreason.train.setup import Run
from mmreason.types import Sample


def build_prompts(run: Run, drawn: list[tuple[int, int]]) -> list[Drawn]:
    """Build prompts for the drawn (slot, dataset index) pairs; broken media and over-long prompts are skipped."""
    if stopping(run):
        return []
    unseen = run.counters.unseen_media
    loaded = [(slot, index, load_prompt(run, index)) for slot, index in drawn]
    check_most_seen(run, run.counters.unseen_media - unseen, len(drawn))
    return [Drawn(slot, index, prompt) for slot, index, prompt in loaded if prompt is not None]


def check_most_seen(run: Run, unseen: int, drawn: int) -> None:
    """Stop the run (``hold``) when most of a step's prompts would not show the model their media."""
    if drawn and unseen > drawn / 2:
        hold(
            run,
            RunStopped(
                f"{unseen} of {drawn} prompts at step {run.step} would not show the model their "
                f"media (see {unseen_dump(run)}): check the chat template and the pixel budgets"
            ),
        )


def unseen_dump(run: Run) -> Path:
    return Path(run.cfg.output_dir) / "unseen_media.jsonl"


def unseen_media(run: Run, report: dict) -> None:
    """Count and dump (ids, counts, paths) a prompt or observation whose media would not reach the model."""
    run.counters.unseen_media += 1
    run.event("unseen_media", **report)
    reason = f"its media would not reach the model (details: {unseen_dump(run)})"
    say_skip(run, "media unseen", run.counters.unseen_media, str(report.get("sample_id", "?")), reason)
    path = unseen_dump(run)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"step": run.step, **report}, default=str) + "\n")


def load_prompt(run: Run, index: int, split: str = "train") -> PromptInputs | None:
    """Load one dataset sample as model inputs for this draw, or None (counted and logged) when it cannot be.

    Past ``max_bad_samples`` broken samples the run stops on every process at the step's agreement point
    (``agree.settle``; the loop saves a checkpoint first).
    """
    try:
        # a lazily read row (a streamed one) the loader may refuse only now
        row = run.dataset[index]
        sample = run.pack.prepare(row, split=split, seed=run.cfg.seed, step=run.step)
    # any one row's failure is that row's counted skip
    except Exception as exc:  # noqa: BLE001
        bad_sample(run, f"row {index}", exc)
        return None
    return prompt_of(run, sample)


def prompt_of(run: Run, sample: Sample) -> PromptInputs | None:
    """Return ``sample`` as model inputs, or None (counted and logged) when it cannot be (``load_prompt``)."""
    d = run.cfg.data
    try:
        return build_prompt(
            run.processor,
            sample,
            max_prompt_length=d.max_prompt_length,
            min_pixels=d.min_pixels,
            max_pixels=d.max_pixels,
            overflow=d.prompt_overflow,
            system_prompt=d.system_prompt,
            video_limits=d.video,
            clock=run.media_time,
            max_images=d.max_images,
            max_videos=d.max_videos,
        )
    except PromptTooLong as exc:
        run.counters.filtered_prompts += 1
        run.event("prompt_filtered", sample_id=sample.id, reason=str(exc))
        say_skip(run, "prompt over data.max_prompt_length", run.counters.filtered_prompts, sample.id, str(exc))
    except UnseenMedia as exc:
        unseen_media(run, exc.report)
    # broken media, or a value a library chokes on (TypeError): counted
    except Exception as exc:  # noqa: BLE001
        bad_sample(run, sample.id, exc)
    return None
