"""A run killed after logging a step and before saving it (``kill -9`` between the two) replays that step on
``resume=auto``: the replay's rows replace the killed run's, so every step appears once in ``metrics.jsonl`` and
``completions.jsonl`` (before: the replayed step twice in each)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mmreason.cli import main
from mmreason.train.logging import drop_steps_after

ROOT = Path(__file__).resolve().parents[2]


def _args(model_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "max_steps=2",
        "save_steps=1",
        "prompts_per_step=2",
        "rollout.num_generations=2",
        "rollout.max_completion_length=2",
        "eval_steps=0",
        "num_threads=1",
        "log_completions_steps=1",
        *extra,
    ]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def test_a_replayed_step_is_logged_once(tiny_model_dir, shapes_cache, tmp_path):
    out = tmp_path / "run"
    assert main(_args(tiny_model_dir, out)) == 0
    completions = _steps(out / "completions.jsonl")
    # the state kill -9 leaves between logging step 2 and writing its checkpoint: step 2 logged, not saved
    shutil.rmtree(out / "checkpoint-2")
    assert main(_args(tiny_model_dir, out, "resume=auto")) == 0
    assert _steps(out / "metrics.jsonl") == [1, 2]
    assert _steps(out / "completions.jsonl") == completions  # step 2's rows once, the replay's


def test_drop_steps_after_keeps_earlier_rows_and_broken_lines_byte_for_byte(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [b'{"step": 0, "eval": 1}', b'{"step": 1,  "x": 1.50}', b"not json", b'{"step": 2}', b'{"step": 3}']
    path.write_bytes(b"\n".join(rows) + b"\n")
    assert drop_steps_after(path, 1) == 2
    assert path.read_bytes() == b"\n".join(rows[:3]) + b"\n"
    assert drop_steps_after(path, 1) == 0
    assert drop_steps_after(path, 0) == 2  # resumed from nothing: the eval before step 1 runs again too
    assert path.read_bytes() == b"not json\n"
    assert drop_steps_after(tmp_path / "absent.jsonl", 3) == 0
