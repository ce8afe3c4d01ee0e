"""Atomic checkpoints: model (or LoRA adapter), optimizer, scheduler, sampler, RNG states, step.

A checkpoint is written to ``checkpoint-<step>.tmp`` and renamed to ``checkpoint-<step>`` only when
complete, so a kill during a save never damages the last good checkpoint; ``resume=auto`` picks the
newest complete one. Only the main process writes; every process restores its own RNG state.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmreason.paths import STATE_FILE, checkpoints


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def resolve_resume(resume: str | None, output_dir: str | Path) -> Path | None:
    if not resume:
        return None
    if resume == "auto":
        found = checkpoints(output_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"resume: {resume!r} is not a complete checkpoint (no {STATE_FILE})")
    return path


def save_checkpoint(accelerator, output_dir: str | Path, step: int, model, optimizer, scheduler,
                    state: dict[str, Any], processor=None, keep: int = 2) -> Path | None:
    """Write checkpoint-<step> atomically; returns its path on the main process."""
    accelerator.wait_for_everyone()
    rank_rng = rng_state()
    all_rng = _gather_objects(accelerator, rank_rng)
    if not accelerator.is_main_process:
        accelerator.wait_for_everyone()
        return None
    final = Path(output_dir) / f"checkpoint-{step}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    unwrapped = accelerator.unwrap_model(model)
    unwrapped.save_pretrained(tmp / "model", safe_serialization=True)
    if processor is not None:
        processor.save_pretrained(tmp / "model")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(all_rng, tmp / "rng_state.pt")
    (tmp / STATE_FILE).write_text(json.dumps({"step": step, **state}, indent=2, default=str))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in checkpoints(output_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def _gather_objects(accelerator, obj):
    if accelerator.num_processes == 1:
        return [obj]
    from accelerate.utils import gather_object

    return gather_object([obj])


def load_checkpoint(path: Path, accelerator, model, optimizer, scheduler) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and this process's RNG; returns the trainer state."""
    from safetensors.torch import load_file

    unwrapped = accelerator.unwrap_model(model)
    model_dir = path / "model"
    if (model_dir / "adapter_model.safetensors").exists():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(unwrapped, load_file(model_dir / "adapter_model.safetensors"))
    else:
        # Load through from_pretrained, which undoes the key renaming save_pretrained applies, then copy
        # into the live (possibly wrapped) model; strict, so a mismatch can never pass silently.
        from transformers import AutoModelForImageTextToText

        dtype = next(unwrapped.parameters()).dtype
        saved = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=dtype)
        unwrapped.load_state_dict(saved.state_dict(), strict=True)
        del saved
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    rng = torch.load(path / "rng_state.pt", weights_only=False)
    set_rng_state(rng[min(accelerator.process_index, len(rng) - 1)])
    return json.loads((path / STATE_FILE).read_text())
