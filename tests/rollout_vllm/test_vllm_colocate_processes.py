"""Colocate mode with 2 training processes (``accelerate launch``, gloo): each process builds a vLLM engine of
its own inside itself (``external_launcher``, on the two processes' world), pushes its weights to it in-process
and samples its own prompts.
Skipped where vLLM or the accelerate CLI is missing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

vllm = pytest.importorskip("vllm")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"


@pytest.mark.skipif(not ACCELERATE.exists(), reason="accelerate CLI not installed")
@pytest.mark.parametrize("launcher, mixed_precision", [("ddp_cpu.yaml", "no"), ("fsdp_cpu.yaml", "bf16")])
def test_two_processes_with_an_engine_each_sample_what_one_process_samples(
    launcher, mixed_precision, tiny_model_dir, shapes_cache, tmp_path
):
    """Every group, and every row of it, that 2 processes (3 prompts each, each through its own engine, after
    an in-process push on each) sample is token for token what 1 process sampling all 6 prompts gets: each
    row's seed comes from (run seed, step, sample id), not from the process or the engine. Under DDP, and under
    FSDP2 with accelerate's bf16 mixed precision (the push gathers the sharded fp32 masters; the engine runs in
    ``model.dtype``)."""
    script = ROOT / "tests" / "parallel" / "step_rollouts_main.py"

    def overrides(out, prompts):
        return [
            f"model.name_or_path={tiny_model_dir}",
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
            "rollout.backend=vllm",
            "rollout.vllm_mode=colocate",
            "rollout.vllm_kv_cache_gib=1",
        ]

    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    config = tmp_path / launcher
    text = (ROOT / "configs" / "accelerate" / launcher).read_text()
    config.write_text(text.replace('mixed_precision: "no"', f'mixed_precision: "{mixed_precision}"'))
    two = subprocess.run(
        [
            str(ACCELERATE),
            "launch",
            "--config_file",
            str(config),
            str(script),
            str(tmp_path / "two.json"),
            *overrides(tmp_path / "two", 3),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert two.returncode == 0, (two.stdout[-2000:], two.stderr[-4000:])
    spec = importlib.util.spec_from_file_location("step_rollouts_main", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(str(tmp_path / "one.json"), overrides(tmp_path / "one", 6))  # this process, alone
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("two", "one"))
    assert (a["processes"], b["processes"]) == (2, 1)
    assert len(a["groups"]) == 6 and sorted(a["groups"]) == sorted(b["groups"])
    for key, rows in b["groups"].items():
        assert a["groups"][key] == rows, key
        assert len(rows) == 4 and len({text for _, text in rows}) > 1  # it sampled
