"""`mmreason export RUN_OR_CHECKPOINT OUT`: a trained policy as a Hugging Face model folder.

The folder holds what ``from_pretrained`` and ``vllm serve OUT`` read, nothing of the suite: the weights
(safetensors; the vision tower included), ``config.json``, ``generation_config.json``, the processor
(tokenizer, image and video processors) and its chat template, and ``export.json`` (where it came from).

- **Which checkpoint**: a checkpoint folder (``checkpoint-<step>``) is exported as named, and refused in one line
  when it is damaged; a run directory gives its newest checkpoint that verifies (as ``resume=auto`` chooses:
  the files against their checksums, the trainer state whole), a damaged one reported and passed over. Export
  only reads: the run directory is never changed (``resume=auto`` renames a damaged checkpoint; export does not).
- **LoRA**: the adapter is merged into the base model (named by the run's ``config.yaml``) in fp32, and the
  merged weights cast to the output dtype once, so no rounding happens before the merge; ``--adapter`` writes
  the adapter alone (``adapter_config.json`` naming the base model's absolute path, the adapter weights in
  the output dtype), for ``PeftModel.from_pretrained`` or ``vllm serve BASE --enable-lora``.
- **Sharded runs**: an FSDP2 run's checkpoint is written whole by the main process (``parallel/sharding.py``
  ``full_state_dict``), so it is read like any other; a checkpoint whose weights ``save_pretrained`` split
  into several files (``model.safetensors.index.json``) is gathered by ``from_pretrained`` on load.
- **dtype**: ``--dtype auto`` keeps the dtype the checkpoint's weights are stored in; ``float32``,
  ``bfloat16`` or ``float16`` casts.

The folder is written beside ``OUT`` under a temporary name and renamed into place last, so ``OUT`` is either
absent or complete. An ``OUT`` that exists and is not an empty folder is refused before anything is read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from mmreason.paths import STATE_FILE, checkpoints
from mmreason.train.checkpoint_verify import DamagedCheckpoint, check_tree, read_state, verify_files

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


class ExportError(ValueError):
    """The source or the output folder cannot be exported from or to (one line naming it)."""


@dataclass(frozen=True)
class ExportSource:
    """A verified checkpoint and where its parts live."""

    checkpoint: Path
    step: int
    # a from_pretrained folder: the checkpoint's model/, or the base model of a LoRA adapter
    weights: Path
    processor_dir: Path
    adapter: Path | None = None  # the checkpoint's model/ when it holds a LoRA adapter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `mmreason export` arguments."""
    parser.add_argument("source", metavar="RUN_OR_CHECKPOINT", help="a training run directory or a checkpoint-<step>")
    parser.add_argument("out", metavar="OUT", help="the folder to write (must not exist, or be empty)")
    parser.add_argument(
        "--dtype",
        choices=["auto", *DTYPES],
        default="auto",
        help="the weights' dtype (auto: as the checkpoint stores them); a LoRA merge runs in float32 first",
    )
    parser.add_argument(
        "--adapter",
        action="store_true",
        help="write a LoRA run's adapter alone (with the processor), not merged into the base model",
    )


def run(args: argparse.Namespace) -> int:
    source = find_source(args.source)
    out = export(source, args.out, dtype=args.dtype, adapter_only=args.adapter)
    record = json.loads((out / "export.json").read_text())
    print(
        f"exported {source.checkpoint.name} (step {source.step}, {record['mode']}, {record['dtype']}) to {out}",
        flush=True,
    )
    return 0


def verified_checkpoint(folder: Path) -> int:
    """Return the step of ``folder`` once it verifies: only regular files, each against its checksum, the trainer state
    whole; ``DamagedCheckpoint`` naming the part else."""
    check_tree(folder)
    verify_files(folder)
    model = folder / "model"
    if not (model / "config.json").is_file() and not (model / ADAPTER_FILES[0]).is_file():
        raise DamagedCheckpoint(f"{folder}: model/ holds no config.json or adapter_config.json")
    return read_state(folder)["step"]


def find_source(spec: str | Path) -> ExportSource:
    """Find the checkpoint ``spec`` names (a checkpoint folder, or a run directory's newest one that verifies)."""
    path = Path(spec)
    if not path.is_dir():
        raise ExportError(f"export: {str(spec)!r} is not a folder (a run directory or a checkpoint-<step>)")
    if (path / STATE_FILE).exists():
        return _source(path, verified_checkpoint(path))
    found = checkpoints(path)
    if not found:
        raise ExportError(f"export: {str(spec)!r} holds no complete checkpoint-<step>/ (nothing was saved yet?)")
    damaged = []
    for candidate in reversed(found):
        try:
            return _source(candidate, verified_checkpoint(candidate))
        except DamagedCheckpoint as exc:
            damaged.append(candidate.name)
            print(f"export: {exc}; trying the previous checkpoint", flush=True)
    raise ExportError(f"export: every checkpoint in {str(spec)!r} is damaged ({', '.join(damaged)})")


def _source(checkpoint: Path, step: int) -> ExportSource:
    from mmreason.eval.model import resolve_model  # the base model of an adapter, as eval finds it

    resolved = resolve_model(str(checkpoint))
    return ExportSource(checkpoint, step, resolved.weights, resolved.processor_dir, resolved.adapter)


def check_out(out: str | Path) -> Path:
    """Return ``out`` as a Path when it can be written: absent, or an empty folder."""
    path = Path(out)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise ExportError(f"export: OUT {str(out)!r} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        raise ExportError(f"export: OUT {str(out)!r} exists and is not empty; give a new folder")
    return path


def stored_dtype(folder: Path) -> torch.dtype:
    """Return the dtype a checkpoint's config records for its weights (``dtype``, or the older ``torch_dtype``)."""
    config = json.loads((folder / "config.json").read_text())
    for holder in (config, config.get("text_config") or {}):
        name = holder.get("dtype") or holder.get("torch_dtype")
        if name in DTYPES:
            return DTYPES[name]
    return torch.float32


def export(source: ExportSource, out: str | Path, *, dtype: str = "auto", adapter_only: bool = False) -> Path:
    """Write ``source`` to ``out`` (see the module docstring); return ``out``."""
    final = check_out(out)
    if adapter_only and source.adapter is None:
        raise ExportError(f"export: --adapter, but {source.checkpoint} holds full weights, not a LoRA adapter")
    target = DTYPES[dtype] if dtype != "auto" else stored_dtype(source.weights)
    tmp = final.with_name(f".{final.name}.export-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        if adapter_only:
            mode = _write_adapter(source, tmp, target)
        else:
            mode = _write_model(source, tmp, target)
        _write_processor(source, tmp)
        record = {
            "source": str(source.checkpoint.resolve()),
            "step": source.step,
            "mode": mode,
            "dtype": str(target).removeprefix("torch."),
            "base_model": str(source.weights.resolve()) if source.adapter is not None else None,
        }
        (tmp / "export.json").write_text(json.dumps(record, indent=2) + "\n")
        if final.is_dir():
            final.rmdir()  # empty (check_out), and replaced in one rename below
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _load_fp32(folder: Path) -> PreTrainedModel:
    from transformers import AutoModelForImageTextToText

    try:
        return AutoModelForImageTextToText.from_pretrained(str(folder), dtype=torch.float32)
    # a truncated or garbled file, whatever the loader says
    except Exception as exc:  # noqa: BLE001
        raise ExportError(f"export: cannot load the weights of {folder} ({' '.join(str(exc).split())[:200]})") from None


def _write_model(source: ExportSource, out: Path, target: torch.dtype) -> str:
    """Write the whole model (a LoRA adapter merged in fp32 first), cast to ``target`` once and saved."""
    model = _load_fp32(source.weights)
    mode = "full"
    if source.adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(source.adapter)).merge_and_unload()
        mode = "lora merged in float32"
    for name, value in model.state_dict().items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ExportError(f"export: {source.checkpoint}: weight {name} holds NaN or inf")
    # transformers types .to through a wrapper
    model = model.to(target)  # type: ignore[arg-type]
    model.config.dtype = target
    model.save_pretrained(out, safe_serialization=True)
    if not (out / "generation_config.json").is_file():
        from transformers import GenerationConfig

        GenerationConfig.from_model_config(model.config).save_pretrained(out)
    return mode


def _write_adapter(source: ExportSource, out: Path, target: torch.dtype) -> str:
    """Write the LoRA adapter alone: its weights cast to ``target``, its config naming the base model's absolute path;
    the base model's generation config beside it."""
    from safetensors.torch import load_file, save_file

    assert source.adapter is not None
    weights = load_file(str(source.adapter / ADAPTER_FILES[1]))
    cast = {k: (v.to(target) if v.is_floating_point() else v).contiguous() for k, v in weights.items()}
    save_file(cast, str(out / ADAPTER_FILES[1]), metadata={"format": "pt"})
    config = json.loads((source.adapter / ADAPTER_FILES[0]).read_text())
    config["base_model_name_or_path"] = str(source.weights.resolve())
    (out / ADAPTER_FILES[0]).write_text(json.dumps(config, indent=2) + "\n")
    generation = source.weights / "generation_config.json"
    if generation.is_file():
        shutil.copyfile(generation, out / "generation_config.json")
    return "lora adapter"


def _write_processor(source: ExportSource, out: Path) -> None:
    """Write the processor the run trained with (tokenizer, image / video processors, chat template)."""
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(str(source.processor_dir))
    # transformers raises many types; the user needs the folder
    except Exception as exc:  # noqa: BLE001
        raise ExportError(f"export: cannot load the processor of {source.processor_dir} ({exc})") from None
    processor.save_pretrained(out)
