"""The files of a run, laid out as lmms-eval lays them out, and how a rerun resumes.

    <output_path>/<model_name>/<timestamp>_results.json        metrics, stderrs, n, and every setting
    <output_path>/<model_name>/<timestamp>_results.md          the terminal table as markdown
    <output_path>/<model_name>/<timestamp>_samples_<task>.jsonl one line per doc (with --log_samples)
    <output_path>/<model_name>/<timestamp>_pending.json         only while a run is incomplete

Resume: the samples files are the run's journal, appended batch by batch. A run writes
``<timestamp>_pending.json`` (its config and config hash) at start and removes it when the results
file is written. The hash covers everything in ``results["config"]`` (model, model_args, gen_kwargs,
seed, limit, batch_size, device, the docs of each task), not the output options.
Rerunning a command whose config hash matches a pending run reuses that run's
timestamp and skips the docs its samples files already hold; a finished run is never reopened, so
rerunning a finished command evaluates afresh under a new timestamp. Without ``--log_samples`` the
journal is deleted once the results are written. Finished samples files are rewritten in doc order,
so an interrupted-and-resumed run leaves the same files as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import mmreason
from mmreason.paths import read_jsonl
from mmreason.rundir import DirLock, RunDirError


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
    except BaseException:
        tmp.unlink(missing_ok=True)  # never a half-written .tmp beside the run's files
        raise
    tmp.replace(path)


def _dumps(record: dict[str, Any]) -> str:
    """One record as a JSON line, UTF-8 as written; a string holding a lone surrogate (a response read from a
    predictions file, say) is written \\u-escaped instead, valid JSON that reads back the same."""
    text = json.dumps(record, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(record, default=str)
    return text


@dataclass
class RunFiles:
    root: Path
    stamp: str
    resumed: bool = False
    lock: DirLock | None = None  # held while the harness writes this run (``open(..., lock=True)``)

    @classmethod
    def open(cls, output_path: str | Path, model_name: str, config: dict[str, Any], *, lock: bool = False) -> RunFiles:
        """The run's folder: a pending run with the same config hash, or a new timestamp.

        ``lock`` (the harness): the run is locked (``<stamp>_lock``, ``mmreason.rundir``) until ``close``, so two
        evaluations of the same command never resume the same pending run together: the second is an error
        naming the first's pid and host. A lock left by a killed evaluation is taken over, with a warning."""
        root = Path(output_path) / model_name
        if Path(output_path).resolve() not in root.resolve().parents:
            raise ValueError(f"model name {model_name!r} would write outside --output_path {str(output_path)!r}")
        root.mkdir(parents=True, exist_ok=True)
        digest = config_hash(config)
        for marker in sorted(root.glob("*_pending.json"), reverse=True):
            try:
                pending = json.loads(marker.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if isinstance(pending, dict) and pending.get("config_hash") == digest:
                files = cls(root, marker.name.removesuffix("_pending.json"), resumed=True)
                if lock:
                    files.lock = DirLock(files.lock_path).acquire(f"the pending evaluation {str(marker)!r}")
                    if not marker.exists():  # finished while we waited for the lock: evaluate afresh
                        files.close()
                        continue
                return files
        base = stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        k = 1
        while True:
            held = None
            if lock:  # reserve the timestamp first: two runs starting in the same second take two
                try:
                    held = DirLock(root / f"{stamp}_lock").acquire(str(root))
                except RunDirError:
                    held = None
                    k += 1
                    stamp = f"{base}-{k}"
                    continue
            if not any(p.name != f"{stamp}_lock" for p in root.glob(f"{stamp}_*")):
                break
            if held is not None:
                held.release()
            k += 1
            stamp = f"{base}-{k}"
        files = cls(root, stamp, lock=held)
        _atomic_write(files.pending_path, json.dumps({"config_hash": digest, "config": config}, indent=2, default=str))
        return files

    def close(self) -> None:
        """Give the run's lock back (when it was taken)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    @property
    def lock_path(self) -> Path:
        return self.root / f"{self.stamp}_lock"

    @property
    def pending_path(self) -> Path:
        return self.root / f"{self.stamp}_pending.json"

    @property
    def results_path(self) -> Path:
        return self.root / f"{self.stamp}_results.json"

    @property
    def markdown_path(self) -> Path:
        return self.root / f"{self.stamp}_results.md"

    def samples_path(self, task_file_name: str) -> Path:
        return self.root / f"{self.stamp}_samples_{task_file_name}.jsonl"

    def read_journal(self, task_file_name: str) -> dict[str, dict[str, Any]]:
        """doc_id -> stored record; a line cut short by a kill is dropped (``mmreason.paths.read_jsonl``, with a
        warning) and the file repaired."""
        path = self.samples_path(task_file_name)
        if not path.exists():
            return {}
        rows = read_jsonl(path)
        records: dict[str, dict[str, Any]] = {str(r["doc_id"]): r for r in rows if "doc_id" in r}
        if rows.skipped or rows.cut_last or len(records) != len(rows):
            _atomic_write(path, "".join(_dumps(r) + "\n" for r in records.values()))
        return records

    def append(self, task_file_name: str, records: list[dict[str, Any]]) -> None:
        """One write per batch, handed to the OS at once, so a killed run loses at most that batch.

        No fsync: a killed process loses nothing the OS already holds, and fsync per batch costs more
        than the harness may spend (see bench.py); a machine crash can cost the last batches.
        """
        if not records:
            return
        with self.samples_path(task_file_name).open("a", encoding="utf-8") as f:
            f.write("".join(_dumps(r) + "\n" for r in records))

    def finish(
        self, results: dict[str, Any], markdown: str, records: dict[str, list[dict[str, Any]]], log_samples: bool
    ) -> None:
        """Write results and table; samples files in doc order (or removed); the run is no longer pending.

        In this order, so that a kill at any point leaves either a pending run that resumes or a
        finished one.
        """
        _atomic_write(self.results_path, json.dumps(results, indent=2, ensure_ascii=False, default=str) + "\n")
        _atomic_write(self.markdown_path, markdown)
        for task_file_name, rows in records.items():
            path = self.samples_path(task_file_name)
            if log_samples:
                _atomic_write(path, "".join(_dumps(r) + "\n" for r in rows))
            else:
                path.unlink(missing_ok=True)
        self.pending_path.unlink(missing_ok=True)


def package_versions() -> dict[str, str | None]:
    """Versions of what can move a score: the engine, its numerics, its decoders; and the accelerator."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import torch

    out: dict[str, str | None] = {"python": platform.python_version(), "mmreason": mmreason.__version__}
    for name in (
        "torch",
        "transformers",
        "accelerate",
        "peft",
        "tokenizers",
        "pillow",
        "pypdfium2",
        "decord",
        "av",
        "numpy",
        "flash-attn",
    ):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["cuda"] = torch.version.cuda
    out["device_name"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    return out


def elapsed_since(start: float) -> float:
    return round(time.perf_counter() - start, 3)
