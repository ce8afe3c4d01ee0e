"""Checkpoint integrity: checksums written last, and every part read and checked before any is applied.

``write_manifest`` records the size and SHA-256 of every file of a checkpoint in ``checksums.json``, the
last file written. ``read_checkpoint`` reads a checkpoint whole — files against their checksums, the
trainer state (a JSON object whose ``step`` is the integer in the folder's name), the RNG list (one state
per process that saved it, never empty), optimizer and scheduler states, weights (every value finite) and
the optimizer state's shapes against the live parameters — and raises ``DamagedCheckpoint`` naming the
checkpoint and the part at the first problem. Nothing is applied to the run until all of it has passed,
so ``resume=auto`` can fall back to an older checkpoint cleanly (``checkpoint.resume``).

A checkpoint written before checksums existed (no ``checksums.json``) gets every check but the checksums.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

from mmreason.paths import STATE_FILE

MANIFEST = "checksums.json"  # written last into checkpoint-<step>/


class DamagedCheckpoint(RuntimeError):
    """A checkpoint that cannot be resumed from: a file missing, truncated or altered, or a part malformed."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> Path:
    """``folder/checksums.json``: {"files": {relative path: {"bytes": n, "sha256": hex}}}, fsynced."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    entries = {str(p.relative_to(folder)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
    path = folder / MANIFEST
    path.write_text(json.dumps({"algorithm": "sha256", "files": entries}, indent=1))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def verify_files(folder: Path) -> None:
    """Every file the manifest lists exists with its size and SHA-256 (no manifest: nothing to compare)."""
    manifest = folder / MANIFEST
    if not manifest.exists():
        return
    try:
        entries = json.loads(manifest.read_text())["files"]
        assert isinstance(entries, dict)
    except Exception:  # noqa: BLE001 - any malformation is the same finding
        raise DamagedCheckpoint(f"{folder}: {MANIFEST} is not a readable checksum list") from None
    for name, entry in entries.items():
        path = folder / name
        if not path.is_file():
            raise DamagedCheckpoint(f"{folder}: {name} is missing")
        size = path.stat().st_size
        if size != entry.get("bytes"):
            raise DamagedCheckpoint(f"{folder}: {name} is {size:,} bytes, {entry.get('bytes'):,} when written "
                                    "(truncated or replaced)")
        if _sha256(path) != entry.get("sha256"):
            raise DamagedCheckpoint(f"{folder}: {name} does not match its checksum")


def read_state(folder: Path) -> dict[str, Any]:
    """The trainer state: a JSON object whose ``step`` is the step in the folder's name."""
    try:
        state = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DamagedCheckpoint(f"{folder}: {STATE_FILE} is not valid JSON ({' '.join(str(exc).split())})") from None
    if not isinstance(state, dict):
        raise DamagedCheckpoint(f"{folder}: {STATE_FILE} is not a JSON object")
    step, named = state.get("step"), folder.name.split("-")[-1]
    if type(step) is not int or not named.isdigit() or step != int(named):
        raise DamagedCheckpoint(f"{folder}: {STATE_FILE} says step {step!r}, the folder step {named}")
    if not isinstance(state.get("sampler"), dict):
        raise DamagedCheckpoint(f"{folder}: {STATE_FILE} has no sampler state")
    return state


def load_part(folder: Path, name: str) -> Any:
    try:
        return torch.load(folder / name, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - truncated zip, empty file, bad pickle: all one finding
        raise DamagedCheckpoint(f"{folder}: {name} cannot be read ({' '.join(str(exc).split())[:200]})") from None


def read_rng(folder: Path) -> list[dict[str, Any]]:
    rng = load_part(folder, "rng_state.pt")
    if not isinstance(rng, list) or not rng or not all(isinstance(r, dict) and "torch" in r for r in rng):
        raise DamagedCheckpoint(f"{folder}: rng_state.pt holds no RNG states (one per process expected)")
    return rng


def check_finite(weights: dict[str, torch.Tensor], folder: Path) -> None:
    """Every floating-point weight finite (a NaN or inf weight would only stop the run later, in sampling)."""
    for name, value in weights.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise DamagedCheckpoint(f"{folder}: weight {name} holds NaN or inf")


def check_optimizer_shapes(saved: dict[str, Any], optimizer, folder: Path) -> None:
    """The saved optimizer state fits the live parameters: as many groups and parameters, and every
    per-parameter tensor (Adam's moments) of its parameter's shape. (0-d entries such as ``step`` pass.)"""
    try:
        groups, state = saved["param_groups"], saved["state"]
        counts = [len(g["params"]) for g in groups]
    except (KeyError, TypeError):
        raise DamagedCheckpoint(f"{folder}: optimizer.pt is not an optimizer state") from None
    live = [g["params"] for g in optimizer.param_groups]
    if counts != [len(p) for p in live]:
        raise DamagedCheckpoint(f"{folder}: optimizer.pt has {counts} parameters per group, the model "
                                f"{[len(p) for p in live]}")
    for group, params in zip(groups, live):
        for index, param in zip(group["params"], params):
            for key, value in (state.get(index) or {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                    raise DamagedCheckpoint(f"{folder}: optimizer.pt {key} of parameter {index} has shape "
                                            f"{tuple(value.shape)}, the parameter {tuple(param.shape)}")
