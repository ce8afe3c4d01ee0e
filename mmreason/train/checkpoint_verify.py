"""Checkpoint integrity: checksums written last, and every part read and checked before any is applied.

``write_manifest`` records the size and SHA-256 of every file of a checkpoint in ``checksums.json``, the
last file written. ``read_checkpoint`` (``checkpoint.py``) reads a checkpoint whole — files against their
checksums, the trainer state (a JSON object whose ``step`` is the integer in the folder's name), the RNG list (one state
per process that saved it, never empty), optimizer and scheduler states, weights (every value finite) and
the optimizer state's shapes against the live parameters — and raises ``DamagedCheckpoint`` naming the
checkpoint and the part at the first problem. Nothing is applied to the run until all of it has passed,
so ``resume=auto`` can fall back to an older checkpoint cleanly (``checkpoint.resume``).

A checkpoint written before checksums existed (no ``checksums.json``) gets every check but the checksums.

The manifest stays inside its folder: an entry that is not a relative path inside it (absolute, ``..``) or is
malformed (a size that is not a byte count, an entry that is not an object) is damage; nothing outside the
folder is ever opened or sized. Only regular files are read (``check_tree``, ``read_regular``): a FIFO in a
checkpoint would otherwise block resume forever.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import torch

from mmreason.paths import MAX_JSON_BYTES, STATE_FILE, read_regular

MANIFEST = "checksums.json"  # written last into checkpoint-<step>/


class DamagedCheckpoint(RuntimeError):
    """A checkpoint that cannot be resumed from: a file missing, truncated or altered, or a part malformed."""


_HEX = frozenset("0123456789abcdef")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_tree(folder: Path) -> None:
    """Check that everything inside ``folder`` is a regular file or a folder, and stays inside it: a FIFO, socket or
    device, or a link leading out of the checkpoint, marks it damaged before any file is opened."""
    root = folder.resolve()
    for path in sorted(folder.rglob("*")):
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            target = path.resolve()
            if root not in target.parents or not (target.is_file() or target.is_dir()):
                raise DamagedCheckpoint(
                    f"{folder}: {path.relative_to(folder)} is a link that leads out of the checkpoint"
                )
            mode = target.stat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise DamagedCheckpoint(f"{folder}: {path.relative_to(folder)} is not a regular file")


def _manifest_entries(folder: Path) -> dict[str, tuple[int, str]]:
    """Read name -> (bytes, sha256) from ``checksums.json``. Any malformation is a ``DamagedCheckpoint``: not JSON, no
    ``files`` object, an entry that is not {"bytes": a non-negative integer, "sha256": 64 hex digits}, or a name that is
    not a relative path inside the folder (absolute, ``..``, empty parts)."""
    where = f"{folder}: {MANIFEST}"
    try:
        entries = json.loads(read_regular(folder / MANIFEST, MAX_JSON_BYTES).decode("utf-8"))["files"]
    # unreadable, not JSON, not an object, no "files": the same finding
    except Exception:  # noqa: BLE001
        raise DamagedCheckpoint(f"{where} is not a readable checksum list") from None
    if not isinstance(entries, dict):
        raise DamagedCheckpoint(f"{where}: 'files' is not an object")
    out = {}
    for name, entry in entries.items():
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts) or "\0" in name:
            raise DamagedCheckpoint(f"{where} lists {name[:80]!r}, not a path inside the checkpoint")
        if not isinstance(entry, dict):
            raise DamagedCheckpoint(f"{where}: the entry of {name!r} is not an object")
        size, digest = entry.get("bytes"), entry.get("sha256")
        if type(size) is not int or size < 0:
            raise DamagedCheckpoint(f"{where}: the size of {name!r} is {size!r}, not a byte count")
        if not isinstance(digest, str) or len(digest) != 64 or not set(digest) <= _HEX:
            raise DamagedCheckpoint(f"{where}: the checksum of {name!r} is not a SHA-256 hex digest")
        out[name] = (size, digest)
    return out


def write_manifest(folder: Path) -> Path:
    """Write ``folder/checksums.json``: {"files": {relative path: {"bytes": n, "sha256": hex}}}, fsynced."""
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
    """Check that every file the manifest lists is a regular file inside the folder, of its size and SHA-256 (no
    manifest: nothing to compare). A malformed manifest is damage, like a file that does not match it."""
    if not (folder / MANIFEST).exists():
        return
    root = folder.resolve()
    for name, (size, digest) in _manifest_entries(folder).items():
        path = folder / name
        if root not in path.resolve().parents:
            raise DamagedCheckpoint(f"{folder}: {MANIFEST} lists {name!r}, which leads out of the checkpoint")
        if not path.is_file():
            raise DamagedCheckpoint(f"{folder}: {name} is missing")
        found = path.stat().st_size
        if found != size:
            raise DamagedCheckpoint(
                f"{folder}: {name} is {found:,} bytes, {size:,} when written (truncated or replaced)"
            )
        if _sha256(path) != digest:
            raise DamagedCheckpoint(f"{folder}: {name} does not match its checksum")


def read_state(folder: Path) -> dict[str, Any]:
    """Read the trainer state: a JSON object whose ``step`` is the step in the folder's name."""
    try:
        state = json.loads(read_regular(folder / STATE_FILE, MAX_JSON_BYTES).decode("utf-8"))
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
    """Load a ``torch.save``d part, read whole from a regular file and unpickled with ``weights_only=True``."""
    try:
        return torch.load(io.BytesIO(read_regular(folder / name)), weights_only=True)
    # truncated zip, empty file, bad pickle: all one finding
    except Exception as exc:  # noqa: BLE001
        raise DamagedCheckpoint(f"{folder}: {name} cannot be read ({' '.join(str(exc).split())[:200]})") from None


def read_rng(folder: Path) -> list[dict[str, Any]]:
    rng = load_part(folder, "rng_state.pt")
    if not isinstance(rng, list) or not rng or not all(isinstance(r, dict) and "torch" in r for r in rng):
        raise DamagedCheckpoint(f"{folder}: rng_state.pt holds no RNG states (one per process expected)")
    return rng


def check_finite(weights: dict[str, torch.Tensor], folder: Path) -> None:
    """Check that every floating-point weight is finite (a NaN or inf weight would only stop the run later, in
    sampling)."""
    for name, value in weights.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise DamagedCheckpoint(f"{folder}: weight {name} holds NaN or inf")


def check_optimizer_shapes(saved: dict[str, Any], optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Check that the saved optimizer state fits the live parameters: as many groups and parameters, and every
    per-parameter tensor (Adam's moments) of its parameter's shape. (0-d entries such as ``step`` pass.)"""
    try:
        groups, state = saved["param_groups"], saved["state"]
        counts = [len(g["params"]) for g in groups]
    except (KeyError, TypeError):
        raise DamagedCheckpoint(f"{folder}: optimizer.pt is not an optimizer state") from None
    live = [g["params"] for g in optimizer.param_groups]
    if counts != [len(p) for p in live]:
        raise DamagedCheckpoint(
            f"{folder}: optimizer.pt has {counts} parameters per group, the model {[len(p) for p in live]}"
        )
    for group, params in zip(groups, live):
        for index, param in zip(group["params"], params):
            for key, value in (state.get(index) or {}).items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != param.shape:
                    raise DamagedCheckpoint(
                        f"{folder}: optimizer.pt {key} of parameter {index} has shape "
                        f"{tuple(value.shape)}, the parameter {tuple(param.shape)}"
                    )
