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


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, default=str)


@dataclass
class RunFiles:
    root: Path
    stamp: str
    resumed: bool = False

    @classmethod
    def open(cls, output_path: str | Path, model_name: str, config: dict[str, Any]) -> RunFiles:
        """The run's folder: a pending run with the same config hash, or a new timestamp."""
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
            if pending.get("config_hash") == digest:
                return cls(root, marker.name.removesuffix("_pending.json"), resumed=True)
        base = stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
        k = 1
        while any(root.glob(f"{stamp}_*")):
            k += 1
            stamp = f"{base}-{k}"
        files = cls(root, stamp)
        _atomic_write(files.pending_path, json.dumps({"config_hash": digest, "config": config}, indent=2,
                                                     default=str))
        return files

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
        """doc_id -> stored record; a line cut short by a kill is dropped and the file repaired."""
        path = self.samples_path(task_file_name)
        if not path.exists():
            return {}
        records: dict[str, dict[str, Any]] = {}
        # Split on "\n" only: a response may hold U+2028 / U+0085, which ``splitlines`` would cut a record at
        # (JSON escapes "\n" inside strings, so every "\n" in the file ends a record).
        lines = [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        for line in lines:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and "doc_id" in record:
                records[str(record["doc_id"])] = record
        if len(records) != len(lines):
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

    def finish(self, results: dict[str, Any], markdown: str, records: dict[str, list[dict[str, Any]]],
               log_samples: bool) -> None:
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

    import mmreason

    out: dict[str, str | None] = {"python": platform.python_version(), "mmreason": mmreason.__version__}
    for name in ("torch", "transformers", "accelerate", "peft", "tokenizers", "pillow", "pypdfium2", "decord",
                 "av", "numpy", "flash-attn"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    out["cuda"] = torch.version.cuda
    out["device_name"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.processor() or "cpu"
    return out


def elapsed_since(start: float) -> float:
    return round(time.perf_counter() - start, 3)
