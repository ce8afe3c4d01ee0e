"""FSDP2 on two CPU processes (gloo) through `accelerate launch` and configs/accelerate/fsdp_cpu.yaml: the
model is sharded by the trainer (torch fully_shard, the same code a GPU runs), rollouts and the
in-training eval generate with the parameters gathered, and the first update equals a single-process run
at the same global batch (which tests/parallel/test_ddp.py shows DDP equals too); the run's checkpoint exports
whole (`mmreason export`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmreason.parallel.sharding import gathered, shard_model

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"


def _args(model_dir, out, prompts, *extra):
    return [
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "max_steps=1",
        f"prompts_per_step={prompts}",
        "rollout.num_generations=4",
        "rollout.max_completion_length=4",
        "num_threads=1",
        "log_completions_steps=0",
        "learning_rate=3e-3",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        *extra,
    ]  # varies on the random model's output


@pytest.mark.slow
@pytest.mark.skipif(
    not ACCELERATE.exists() and shutil.which("accelerate") is None, reason="accelerate CLI not installed"
)
def test_fsdp2_generates_evaluates_and_its_first_update_equals_single_process(tiny_model_dir, shapes_cache, tmp_path):
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    try:
        two = subprocess.run(
            [
                str(ACCELERATE),
                "launch",
                "--config_file",
                str(ROOT / "configs/accelerate/fsdp_cpu.yaml"),
                "-m",
                "mmreason",
                "train",
                *_args(tiny_model_dir, tmp_path / "fsdp", 2, "eval_steps=1", "eval_limit=4"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the FSDP run did not end (a process waits at a collective): {(exc.stderr or b'')[-3000:]!r}")
    assert two.returncode == 0, two.stderr[-3000:]
    assert "processes: 2" in two.stdout and "fsdp2:" in two.stdout  # sharded, not silently DDP
    one = subprocess.run(
        [sys.executable, "-m", "mmreason", "train", *_args(tiny_model_dir, tmp_path / "one", 4, "eval_steps=0")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert one.returncode == 0, one.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "fsdp" / "metrics.jsonl").read_text().splitlines()]
    # In-training eval ran under FSDP: before step 1 and at step 1, on the 4 held-out docs.
    assert [r["step"] for r in rows] == [0, 1]
    assert all("eval/shapes/accuracy" in r and r["eval/shapes/n_failed"] == 0 for r in rows)
    records = (tmp_path / "fsdp" / "eval" / "step-1_samples_shapes.jsonl").read_text().splitlines()
    assert len(records) == 4
    ma, mb = rows[1], json.loads((tmp_path / "one" / "metrics.jsonl").read_text().splitlines()[0])
    assert ma["reward/mean"] == pytest.approx(mb["reward/mean"], abs=1e-6)  # same rollouts
    assert ma["grad_norm"] == pytest.approx(mb["grad_norm"], rel=1e-5)
    # FSDP2 packed its mini-batches (padding_free; the shared prefix is off there), one process took the shared prefix
    assert (ma["update/padding_free"], ma["update/shared_prefix"], mb["update/shared_prefix"]) == (1.0, 0.0, 1.0)
    base = load_file(Path(tiny_model_dir) / "model.safetensors")
    a = load_file(tmp_path / "fsdp" / "checkpoint-1" / "model" / "model.safetensors")  # gathered whole
    b = load_file(tmp_path / "one" / "checkpoint-1" / "model" / "model.safetensors")
    assert a.keys() == b.keys()
    lr, moved = 3e-3, 0
    for k in base:
        delta_a, delta_b = a[k] - base[k], b[k] - base[k]
        moved += int(delta_b.abs().max() > lr / 2)
        torch.testing.assert_close(delta_a, delta_b, atol=lr * 1e-2, rtol=0, msg=k)
    assert moved > 10
    # `mmreason export` reads the sharded run's checkpoint whole: every tensor as the checkpoint holds it
    # (tests/train/test_export.py shows an export's outputs equal the policy's on one-process runs)
    from mmreason.cli import main

    assert main(["export", str(tmp_path / "fsdp"), str(tmp_path / "fsdp-hf")]) == 0
    exported = load_file(tmp_path / "fsdp-hf" / "model.safetensors")
    assert exported.keys() == a.keys() and all(torch.equal(exported[k], a[k]) for k in a)


def test_wrap_classes_must_exist_in_the_model(tiny):
    model, _ = tiny
    with pytest.raises(ValueError, match="NoSuchLayer.*Qwen2_5_VLDecoderLayer"):
        shard_model(model, ["Qwen2_5_VLDecoderLayer", "NoSuchLayer"])


def test_gathered_leaves_an_unsharded_model_as_it_is(tiny):
    model, _ = tiny
    with gathered(model) as inside:
        assert inside is model
