"""Two gloo processes decide together: a fault that one process alone sees (a NaN loss, the broken-sample
limit, the reward-error limit) makes both skip the update or both stop, within seconds, and uneven work
(one process with fewer prompts, so fewer mini-batches and forwards) does not leave the other waiting.
A hang fails the test through the subprocess timeout instead of blocking the suite."""

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

from mmreason.sampling import UniformSampler
from mmreason.tasks.shapes.synth import generate

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"
HANG = 150  # seconds: a run that has not ended by then is waiting at a collective

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not ACCELERATE.exists() and shutil.which("accelerate") is None, reason="accelerate CLI not installed"
    ),
]

FAULTS = '''
import os

from mmreason.rl import POLICY_LOSSES, loss_contract

CALLS = [0]


@loss_contract(reads=("epsilon", "epsilon_high", "importance_sampling_level"))
def nan_first_on_rank0(x, **options):
    """The clipped loss, NaN on process 0's first call only."""
    out = POLICY_LOSSES.get("clipped")(x, **options)
    CALLS[0] += 1
    if os.environ.get("RANK") == "0" and CALLS[0] == 1:
        out.loss = out.loss * float("nan")
    return out


def fails_on_rank0(prompts, completions, **kwargs):
    if os.environ.get("RANK") == "0":
        raise RuntimeError("reward broken on process 0")
    return [0.0] * len(completions)
'''


def _launch(tiny_model_dir, cache, out, *extra):
    env = {**os.environ, "MMREASON_CACHE": str(cache), "OMP_NUM_THREADS": "1"}
    args = [
        str(ROOT / "configs" / "quickstart.yaml"),
        f"model.name_or_path={tiny_model_dir}",
        f"output_dir={out}",
        "prompts_per_step=2",
        "rollout.num_generations=2",
        "rollout.max_completion_length=3",
        "num_threads=1",
        "log_completions_steps=0",
        "eval_steps=0",
        "save_steps=0",
        *extra,
    ]
    try:
        return subprocess.run(
            [
                str(ACCELERATE),
                "launch",
                "--config_file",
                str(ROOT / "configs/accelerate/ddp_cpu.yaml"),
                "-m",
                "mmreason",
                "train",
                *args,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"the two processes did not end within {HANG} s (one waits at a collective):\n"
            f"{(exc.stderr or b'')[-3000:]!r}"
        )


def _events(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "events.log").read_text().splitlines()]


def test_nan_loss_on_one_process_skips_both_then_a_reward_limit_on_one_stops_both(
    tiny_model_dir, shapes_cache, tmp_path
):
    faults = tmp_path / "faults.py"
    faults.write_text(FAULTS)
    out = tmp_path / "run"
    # Process 0's reward fails on all of its 2 prompts x 2 rollouts = 4 calls per step: step 1 stays under
    # max_reward_errors=5, step 2 passes it. Its loss is NaN on step 1 only.
    run = _launch(
        tiny_model_dir,
        shapes_cache,
        out,
        "max_steps=3",
        "max_reward_errors=5",
        f"algorithm.policy_loss={faults}:nan_first_on_rank0",
        f"rewards=[{{name: {faults}:fails_on_rank0}}, {{name: anls, kwargs: {{threshold: 0.0}}}}]",
    )
    assert run.returncode != 0, "the run should stop at step 2"
    assert "max_reward_errors=5" in run.stderr and "reward broken on process 0" in run.stderr
    assert "process 0 stopped" in run.stderr  # process 1 stopped too, naming why
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["skipped_update"] == 1.0 and rows[0]["count/nan_steps"] == 1
    events = _events(out)
    # Both processes skipped step 1's update (process 1's own loss was finite).
    assert {e["rank"] for e in events if e["event"] == "nonfinite_loss"} == {0, 1}
    # The checkpoint written at the stop is step 1's, and step 1 changed nothing: no process updated alone.
    base = load_file(Path(tiny_model_dir) / "model.safetensors")
    saved = load_file(out / "checkpoint-1" / "model" / "model.safetensors")
    for k in base:
        torch.testing.assert_close(saved[k], base[k], rtol=0, atol=0, msg=k)


def test_broken_samples_on_one_process_uneven_work_then_both_stop_at_the_limit(tiny_model_dir, shapes_cache, tmp_path):
    jsonl = generate(tmp_path / "data", 8, seed=1)
    rows = [json.loads(x) for x in jsonl.read_text().splitlines()]
    # Every process draws the same global batch of 2 x 2 prompts per step; process 1 takes the last two.
    sampler = UniformSampler(len(rows), seed=0)
    step1, step2 = sampler.next_indices(4), sampler.next_indices(4)
    broken = [step1[2], step2[3]]  # process 1's only: one at step 1, one at step 2
    for i in broken:
        Path(rows[i]["image"]).write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    data = tmp_path / "broken.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    # mini_batch_size=2: process 0 has 2 groups x 2 rollouts = 2 mini-batches at step 1, process 1 only one.
    run = _launch(
        tiny_model_dir,
        shapes_cache,
        out,
        "max_steps=3",
        f"data.train_path={data}",
        "max_bad_samples=1",
        "mini_batch_size=2",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
    )
    assert run.returncode != 0, "the run should stop at step 2"
    assert "max_bad_samples=1" in run.stderr and "process 1 stopped" in run.stderr
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics] == [1]
    assert "skipped_update" not in metrics[0] and metrics[0]["grad_norm"] > 0  # step 1 trained, unevenly split
    bad = [e for e in _events(out) if e["event"] == "bad_sample"]
    assert [(e["rank"], e["sample_id"]) for e in bad] == [(1, rows[i]["id"]) for i in broken]
    assert (out / "checkpoint-1" / "trainer_state.json").exists()


SAVE = """
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

from mmreason.train.checkpoint import save_checkpoint

acc = Accelerator(cpu=True)
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.ConstantLR(optimizer, factor=1.0)
model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
out = Path(sys.argv[1])
try:
    save_checkpoint(acc, out, 1, model, optimizer, scheduler=scheduler, state={})
except Exception as exc:
    print(f"rank {acc.process_index} raised {type(exc).__name__}: {exc}", flush=True)
    raise SystemExit(3)
print(f"rank {acc.process_index} saved", flush=True)
"""


def test_a_failed_checkpoint_write_on_the_main_process_raises_on_both(tmp_path):
    script = tmp_path / "save.py"
    script.write_text(SAVE)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the output folder should be")  # the main process cannot write there
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    try:
        run = subprocess.run(
            [
                str(ACCELERATE),
                "launch",
                "--config_file",
                str(ROOT / "configs/accelerate/ddp_cpu.yaml"),
                str(script),
                str(blocked),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("a process still waits after the main process failed to write the checkpoint")
    assert "rank 0 raised" in run.stdout and "rank 1 raised CheckpointError" in run.stdout, run.stdout + run.stderr
    assert "saved" not in run.stdout
