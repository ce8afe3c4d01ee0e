"""Atomic checkpoints: model (or LoRA adapter), optimizer, scheduler, sampler, RNG states, step.

A checkpoint is written to ``checkpoint-<step>.tmp``, every file and the folder fsynced, the trainer state
and then the checksums of every file written last (``checksums.json``: its presence marks a complete
checkpoint; ``checkpoint_verify``), then renamed to ``checkpoint-<step>``. Replacing an
existing checkpoint renames the old one aside first and removes it only after the new one is in place, so
a ``kill -9`` at any moment leaves a complete checkpoint behind; ``recover`` (run before ``resume=auto``
picks one) puts an aside checkpoint back, promotes a complete ``.tmp`` and removes stale ones; ``resume``
verifies the newest and falls back to the previous one when it is damaged. Only the main
process writes; every process restores its own RNG state. Everything is loaded with ``weights_only=True``.
Every process learns whether the write succeeded (a failed write raises on all of them, none waits).
The trainer state carries the writing run's id (``mmreason.rundir``); rotation deletes only that run's checkpoints.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from accelerate.utils import gather_object
from peft import set_peft_model_state_dict
from safetensors.torch import load as load_safetensors
from transformers import AutoModelForImageTextToText

from mmreason.parallel.agree import any_rank
from mmreason.parallel.sharding import (
    full_optimizer_state,
    full_state_dict,
    is_sharded,
    load_full_optimizer_state,
    load_full_state_dict,
)
from mmreason.paths import STATE_FILE, checkpoint_run_id, checkpoints, read_regular
from mmreason.train.checkpoint_verify import (
    MANIFEST,
    DamagedCheckpoint,
    check_finite,
    check_optimizer_shapes,
    check_tree,
    load_part,
    read_rng,
    read_state,
    verify_files,
    write_manifest,
)

if TYPE_CHECKING:
    from accelerate import Accelerator
    from transformers import ProcessorMixin

    from mmreason.train.setup import Scheduler


def rng_state() -> dict[str, Any]:
    """Return the RNG states as tensors and plain numbers (loadable with ``weights_only=True``)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_as_tuples(state["python"]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(value: Any) -> Any:
    """Turn lists back into tuples: ``random.setstate`` needs tuples, and a saved state may come back with lists."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def recover(output_dir: str | Path) -> None:
    """Finish or undo what a kill interrupted: an aside (``.old``) checkpoint whose replacement never landed
    goes back, a complete ``.tmp`` whose rename never happened is promoted, everything else is removed."""
    out = Path(output_dir)
    if not out.is_dir():
        return
    for aside in out.glob("checkpoint-*.old"):
        final = aside.with_suffix("")
        if final.exists():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            aside.rename(final)
    for tmp in out.glob("checkpoint-*.tmp"):
        final = tmp.with_suffix("")
        if (tmp / MANIFEST).exists() and not final.exists():
            tmp.rename(final)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def resolve_resume(resume: str | None, output_dir: str | Path) -> Path | None:
    if not resume:
        return None
    if resume == "auto":
        recover(output_dir)
        found = checkpoints(output_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"resume: {resume!r} is not a complete checkpoint (no {STATE_FILE})")
    return path


def save_checkpoint(
    accelerator: Accelerator,
    output_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    scheduler: Scheduler,
    state: dict[str, Any],
    processor: ProcessorMixin | None = None,
    keep: int = 2,
    run_id: str | None = None,
) -> Path | None:
    """Write checkpoint-<step> atomically; return its path on the main process (None elsewhere).

    ``run_id`` (the writing run's, ``mmreason.rundir``) goes into the trainer state, and rotation then keeps the
    newest ``keep`` checkpoints of that run and deletes none of another run's (without it: of any run).

    A failed write raises on every process: the main process's error there, a ``CheckpointError`` naming
    it on the others."""
    accelerator.wait_for_everyone()
    all_rng = _gather_objects(accelerator, rng_state())
    unwrapped = accelerator.unwrap_model(model)
    whole = (full_state_dict(unwrapped), full_optimizer_state(unwrapped, optimizer))  # sharded: every process
    final, error = None, None
    if accelerator.is_main_process:
        try:
            state = {**state, "run_id": run_id} if run_id is not None else state
            final = _write(
                accelerator,
                output_dir,
                step,
                model,
                optimizer,
                scheduler=scheduler,
                state=state,
                processor=processor,
                keep=keep,
                all_rng=all_rng,
                whole=whole,
            )
        # raised below, after every process has heard of it
        except Exception as exc:  # noqa: BLE001
            error = exc
    if any_rank(accelerator, error is not None):  # also the closing barrier
        if error is not None:
            raise error
        raise CheckpointError(f"the main process failed to write checkpoint-{step} in {output_dir}")
    return final


class CheckpointError(RuntimeError):
    """The main process failed to write a checkpoint (raised on the other processes)."""


def _write(
    accelerator: Accelerator,
    output_dir: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    scheduler: Scheduler,
    state: dict[str, Any],
    processor: ProcessorMixin | None,
    keep: int,
    all_rng: list[Any],
    whole: tuple[dict[str, Any] | None, dict[str, Any] | None] = (None, None),
) -> Path:
    """Write the main process's part; ``whole`` = a sharded model's gathered (model, optimizer) state dicts."""
    final = Path(output_dir) / f"checkpoint-{step}"
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    unwrapped = accelerator.unwrap_model(model)
    model_state, optimizer_state = whole
    unwrapped.save_pretrained(
        tmp / "model", safe_serialization=True, **({"state_dict": model_state} if model_state is not None else {})
    )
    if processor is not None:
        processor.save_pretrained(tmp / "model")
    torch.save(optimizer_state if optimizer_state is not None else optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(all_rng, tmp / "rng_state.pt")
    _fsync_tree(tmp)
    (tmp / STATE_FILE).write_text(json.dumps({"step": step, **state}, indent=2, default=str))
    _fsync(tmp / STATE_FILE)
    # last: the checksums of every file above; its presence marks a complete checkpoint
    write_manifest(tmp)
    _fsync(tmp)
    aside = final.with_name(final.name + ".old")
    if final.exists():
        shutil.rmtree(aside, ignore_errors=True)
        final.rename(aside)
    tmp.rename(final)
    _fsync(final.parent)
    shutil.rmtree(aside, ignore_errors=True)
    run_id = state.get("run_id")
    mine = [c for c in checkpoints(output_dir) if run_id is None or checkpoint_run_id(c) == run_id]
    for old in mine[:-keep] if keep > 0 else []:  # this run's only: never another run's or a user's folder
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """Flush every file and folder under ``root`` (and ``root``) to disk."""
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        _fsync(path)
    _fsync(root)


def _gather_objects(accelerator: Accelerator, obj: Any) -> list[Any]:
    if accelerator.num_processes == 1:
        return [obj]

    return gather_object([obj])


def load_checkpoint(
    path: Path,
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Scheduler,
    *,
    check_state: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and this process's RNG; return the trainer state.

    The whole checkpoint is read into memory and checked first (``read_checkpoint``; ``check_state(state)``, the
    caller's trial of the parts it restores itself: sampler, augmenter); a ``DamagedCheckpoint`` leaves the run
    untouched. Only then is any of it applied."""
    unwrapped = accelerator.unwrap_model(model)
    loaded = read_checkpoint(path, unwrapped, optimizer, scheduler)
    if check_state is not None:
        try:
            check_state(loaded[0])
        # a missing key, a wrong type: the state is not one this run takes
        except Exception as exc:  # noqa: BLE001
            raise DamagedCheckpoint(
                f"{path}: {STATE_FILE} holds a state this run cannot restore "
                f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
            ) from None
    state, rng, optimizer_state, scheduler_state, weights, adapter = loaded
    if adapter:
        set_peft_model_state_dict(unwrapped, weights)
    elif is_sharded(unwrapped):
        load_full_state_dict(unwrapped, weights)
    else:
        unwrapped.load_state_dict(weights, strict=True)
    del weights, loaded
    if is_sharded(unwrapped):
        load_full_optimizer_state(unwrapped, optimizer, optimizer_state)
    else:
        optimizer.load_state_dict(optimizer_state)
    scheduler.load_state_dict(scheduler_state)
    set_rng_state(rng[min(accelerator.process_index, len(rng) - 1)])
    return state


def read_checkpoint(
    path: Path, unwrapped: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Scheduler
) -> tuple[Any, ...]:
    """Read (state, RNG list, optimizer state, scheduler state, weights, is an adapter), every part into memory. Each is
    checked against the live run by ``checkpoint_verify``: no special file, checksums, state, RNG states that apply,
    scheduler state, finite weights that fit the model, optimizer shapes. Anything else is a ``DamagedCheckpoint``."""
    check_tree(path)
    verify_files(path)
    state = read_state(path)
    rng = read_rng(path)
    check_rng(rng, path)
    optimizer_state = load_part(path, "optimizer.pt")
    scheduler_state = load_part(path, "scheduler.pt")
    if not isinstance(scheduler_state, dict) or not isinstance(scheduler_state.get("last_epoch"), int):
        raise DamagedCheckpoint(f"{path}: scheduler.pt is not a scheduler state")
    model_dir = path / "model"
    adapter = model_dir / "adapter_model.safetensors"
    try:
        if adapter.exists():
            weights = load_safetensors(read_regular(adapter))
        else:
            # Load through from_pretrained, which undoes the key renaming save_pretrained applies, then copy
            # into the live (possibly wrapped) model; strict, so a mismatch can never pass silently.

            dtype = next(unwrapped.parameters()).dtype
            weights = AutoModelForImageTextToText.from_pretrained(str(model_dir), dtype=dtype).state_dict()
    # a truncated or garbled weights file, whatever the loader says
    except Exception as exc:  # noqa: BLE001
        raise DamagedCheckpoint(
            f"{path}: the model weights cannot be read ({' '.join(str(exc).split())[:200]})"
        ) from None
    check_finite(weights, path)
    sharded = is_sharded(unwrapped)
    if not adapter.exists() and not sharded:
        check_weights_fit(weights, unwrapped.state_dict(), path)
    if not sharded:
        check_optimizer_shapes(optimizer_state, optimizer, path)
    return state, rng, optimizer_state, scheduler_state, weights, adapter.exists()


def check_rng(rng: list[dict[str, Any]], path: Path) -> None:
    """Check that every saved RNG state can be set (tried on this process, whose own state is put back after): a state
    that cannot is damage found before anything is applied, not after the weights were."""
    own = rng_state()
    try:
        for entry in rng:
            set_rng_state(entry)
    # a missing key, a wrong type or size: all one finding
    except Exception as exc:  # noqa: BLE001
        raise DamagedCheckpoint(
            f"{path}: rng_state.pt holds an RNG state that cannot be set "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
        ) from None
    finally:
        set_rng_state(own)


def check_weights_fit(weights: dict[str, torch.Tensor], live: dict[str, torch.Tensor], path: Path) -> None:
    """Check that the saved weights have the live model's keys and shapes (a strict ``load_state_dict`` would otherwise
    copy the matching ones before it raises on the rest)."""
    missing, extra = sorted(set(live) - set(weights)), sorted(set(weights) - set(live))
    if missing or extra:
        raise DamagedCheckpoint(
            f"{path}: the weights do not fit the model ({len(missing)} missing, e.g. "
            f"{missing[:1]}; {len(extra)} unexpected, e.g. {extra[:1]})"
        )
    for name, value in weights.items():
        if value.shape != live[name].shape:
            raise DamagedCheckpoint(
                f"{path}: weight {name} has shape {tuple(value.shape)}, the model {tuple(live[name].shape)}"
            )


def resume(
    resume_from: str | None,
    output_dir: str | Path,
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    scheduler: Scheduler,
    log: Callable[[str], object] = print,
    check_state: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[Path, dict[str, Any]] | None:
    """Load the checkpoint ``resume_from`` names; return (its path, the trainer state), or None to start afresh.

    ``auto``: the newest complete checkpoint of ``output_dir`` that reads whole. A damaged one is reported
    (``log`` on the main process), renamed ``checkpoint-N.damaged`` (out of the rotation, kept to inspect)
    and the previous one tried; none left is an error. An explicit path to a damaged checkpoint is an error."""
    path = resolve_resume(resume_from, output_dir)
    if path is None:
        return None
    if resume_from != "auto":
        return path, load_checkpoint(path, accelerator, model, optimizer, scheduler, check_state=check_state)
    damaged: list[Path] = []
    loaded = None
    for candidate in reversed(checkpoints(output_dir)):
        try:
            loaded = (
                candidate,
                load_checkpoint(candidate, accelerator, model, optimizer, scheduler, check_state=check_state),
            )
            break
        except DamagedCheckpoint as exc:
            damaged.append(candidate)
            if accelerator.is_main_process:
                log(f"resume=auto: {exc}; trying the previous checkpoint")
    accelerator.wait_for_everyone()  # every process has chosen before any folder is renamed
    if accelerator.is_main_process:
        for folder in damaged:
            folder.rename(folder.with_name(folder.name + ".damaged"))
    if loaded is None:
        raise DamagedCheckpoint(
            f"resume=auto: every checkpoint in {output_dir} is damaged "
            f"({', '.join(p.name for p in damaged)}, now *.damaged); resume from a path or "
            "start a new output_dir"
        )
    if damaged and accelerator.is_main_process:
        log(f"resume=auto: fell back to {loaded[0].name}")
    return loaded
