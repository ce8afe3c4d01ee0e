"""A 2-process run samples what a 1-process run samples at the same global batch: every group, and every
row of it, token for token (all groups of a process generate in one batched call with per-row seeds)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("step_rollouts_main.py")


def _overrides(model_dir, out, prompts):
    return [
        f"model.name_or_path={model_dir}",
        "data.task=shapes",
        "data.max_prompt_length=512",
        f"output_dir={out}",
        f"prompts_per_step={prompts}",
        "rollout.num_generations=4",
        "rollout.max_completion_length=12",
        "rollout.temperature=1.0",
        "num_threads=1",
        "eval_steps=0",
        "rewards=[{name: anls}]",
    ]


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists(),
    reason="accelerate CLI not installed",
)
def test_two_processes_sample_what_one_process_samples(tiny_model_dir, shapes_cache, tmp_path, one_torch_thread):
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    accelerate = str(Path(sys.executable).parent / "accelerate")
    two = subprocess.run(
        [
            accelerate,
            "launch",
            "--config_file",
            str(ROOT / "configs/accelerate/ddp_cpu.yaml"),
            str(SCRIPT),
            str(tmp_path / "two.json"),
            *_overrides(tiny_model_dir, tmp_path / "two", 3),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    spec = importlib.util.spec_from_file_location("step_rollouts_main", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(str(tmp_path / "one.json"), _overrides(tiny_model_dir, tmp_path / "one", 6))  # this process
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("two", "one"))
    assert (a["processes"], b["processes"]) == (2, 1)
    assert len(a["groups"]) == 6 and sorted(a["groups"]) == sorted(b["groups"])
    for key, rows in b["groups"].items():
        assert a["groups"][key] == rows, key  # token ids and text of every row
        assert len(rows) == 4 and len({text for _, text in rows}) > 1  # it sampled
