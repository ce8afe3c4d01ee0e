"""A run directory belongs to one run: a lock while a run writes there, and a refusal to start over another's.

``DirLock`` is a lock file holding its holder's pid, host and start time, locked with ``flock`` while the holder
runs: the kernel releases it when the holder dies, however it dies, so a lock left by a killed run is taken over
(with a warning naming the dead holder) and one held by a live run is an error naming it. (Two runs on two hosts
sharing a folder over NFS are kept apart as far as the NFS server's locks reach.)

``claim_output_dir`` is how ``mmreason train`` and ``mmreason sft`` take their ``output_dir``: the lock, then a
refusal of a folder that holds anything (an earlier run, a user's files) unless ``resume=`` continues a run there
or ``overwrite_output_dir=true`` (TRL's name) starts a new one over it. Overwriting removes what an earlier
mmreason run wrote there (its logs, config and checkpoints) and nothing else. Each run has an id, written into
every checkpoint it saves; rotation (``save_total_limit``) deletes only checkpoints carrying this run's id.
(``mmreason eval``'s folders hold many runs by design; the eval harness locks the one run it writes,
``mmreason/eval/output.py``.)
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mmreason.paths import is_mmreason_checkpoint

log = logging.getLogger("mmreason.rundir")

LOCK_FILE = "run.lock"
# What an mmreason run writes at the top of its output_dir, besides checkpoints (removed by overwrite_output_dir)
RUN_FILES = (
    "config.yaml",
    "metrics.jsonl",
    "completions.jsonl",
    "events.log",
    "unseen_media.jsonl",
    "curves.png",
    "report.html",
)


class RunDirError(ValueError):
    """An output folder another run holds, or one that is not empty (a one-line user error)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _holder(info: dict[str, Any]) -> str:
    pid, host = info.get("pid"), info.get("host")
    started = info.get("started")
    when = (
        time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else ""
    )
    return f"pid {pid} on host {host}{when}"


@dataclass
class DirLock:
    """An exclusive lock on ``path`` (a file): ``acquire`` or ``RunDirError`` naming the holder; ``release``."""

    path: Path
    fd: int | None = None

    def acquire(self, what: str) -> DirLock:
        """Take the lock (``what`` names the folder in messages). A lock file whose holder is gone is taken over
        with a warning; a held one is a ``RunDirError`` naming its holder's pid and host."""
        for _ in range(8):  # another process may remove a released lock file between our open and our flock
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                info = read_lock(self.path)
                alive = (
                    ""
                    if info.get("host") != socket.gethostname() or _alive(int(info.get("pid") or 0))
                    else " (not running any more; a process it started still holds the lock)"
                )
                raise RunDirError(
                    f"{what} is in use by another run: {_holder(info)}{alive} holds {self.path}; "
                    "wait for it to end, or choose another folder"
                ) from None
            if not _same_file(fd, self.path):  # locked a file its holder had just released and removed
                os.close(fd)
                continue
            previous = _read_fd(fd)
            if previous.get("pid") is not None:
                log.warning(
                    "%s: taking over the lock left by %s, which no longer holds it (killed?)", what, _holder(previous)
                )
            os.ftruncate(fd, 0)
            os.pwrite(
                fd,
                json.dumps(
                    {
                        "pid": os.getpid(),
                        "host": socket.gethostname(),
                        "started": time.time(),
                        "command": " ".join(sys.argv[:3]),
                    }
                ).encode(),
                0,
            )
            self.fd = fd
            return self
        raise RunDirError(f"{what}: could not take the lock {self.path} (it keeps being replaced)")

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if _same_file(self.fd, self.path):
                self.path.unlink()  # unlinked while still held: nobody can lock the old file after this
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read_fd(fd: int) -> dict[str, Any]:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def read_lock(path: Path) -> dict[str, Any]:
    """The holder a lock file names (``{}`` when it names none or cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        return _read_fd(fd)
    finally:
        os.close(fd)


@dataclass
class RunDir:
    """A claimed output folder: its lock and the id of the run writing there."""

    path: Path
    lock: DirLock
    run_id: str

    def release(self) -> None:
        self.lock.release()


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def claim_output_dir(output_dir: str | Path, *, resume: str | None, overwrite: bool, key: str = "output_dir") -> RunDir:
    """Lock ``output_dir`` for this run; refuse it when it holds anything and the run neither resumes
    (``resume``) nor overwrites (``overwrite``); with ``overwrite``, remove an earlier run's files first."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    lock = DirLock(out / LOCK_FILE).acquire(f"{key} {str(out)!r}")
    try:
        present = sorted(p.name for p in out.iterdir() if p.name != LOCK_FILE)
        if present and not resume:
            if not overwrite:
                shown = ", ".join(present[:4]) + (f" and {len(present) - 4} more" if len(present) > 4 else "")
                raise RunDirError(
                    f"{key} {str(out)!r} is not empty (it holds {shown}); give resume=auto to continue "
                    "the run there, overwrite_output_dir=true to start a new run over it, or another "
                    f"{key}"
                )
            remove_earlier_run(out)
    except BaseException:
        lock.release()
        raise
    return RunDir(out, lock, new_run_id())


def remove_earlier_run(out: Path) -> list[str]:
    """What an earlier mmreason run wrote in ``out``: its logs and config (``RUN_FILES``), its in-training evals'
    ``eval/step-*_samples_*.jsonl``, its checkpoints (``checkpoint-N`` whose trainer state is an mmreason one,
    and mmreason's ``.tmp`` / ``.old`` / ``.damaged`` leftovers); anything else (a user's files, another
    trainer's checkpoints) stays."""
    removed = []
    for path in sorted(out.iterdir()):
        name = path.name
        ours = name in RUN_FILES and (path.is_file() or path.is_symlink())
        if path.is_dir() and not path.is_symlink() and name.startswith("checkpoint-"):
            step, _, suffix = name.removeprefix("checkpoint-").partition(".")
            ours = step.isdigit() and (
                suffix in ("tmp", "old", "damaged") or (not suffix and is_mmreason_checkpoint(path))
            )
        if name == "eval" and path.is_dir() and not path.is_symlink():  # the in-training evals' samples
            for samples in path.glob("step-*_samples_*.jsonl"):
                samples.unlink()
                removed.append(f"eval/{samples.name}")
        if ours:
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            removed.append(name)
    if removed:
        shown = ", ".join(removed[:6]) + (f" and {len(removed) - 6} more" if len(removed) > 6 else "")
        log.warning("overwrite_output_dir: removed the earlier run's %s from %s", shown, out)
    return removed
