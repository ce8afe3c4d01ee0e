"""The first-hour matrix on CPU processes: {one process, DDP, FSDP2} x {fp32, bf16 model, accelerate's bf16
mixed precision}, less the two one-process cells other tests run; two GRPO steps each through `accelerate launch`
and the launcher config a GPU user would pick (configs/accelerate/*_cpu.yaml, their mixed_precision swapped in),
on the tiny model.

The two-process cells read a dataset whose rows are text-only, one image, two images and a video, one prompt per
process per step and one row per mini-batch, so the processes' mini-batches differ in modality at every step; the
in-training eval runs on the same mix. Before the vision stand-ins (rollout/stand_ins.py) FSDP2 died at step 2 with
a gloo size mismatch (one process ran the vision blocks, the other did not); before the head computed in the run's
precision (rl/lm_head.py) every bf16-mixed-precision cell with a bf16 model died at its first update. SFT on the
same mix under DDP and FSDP2 (each died at step 2) is the last two cells. The FSDP2 cells keep a reference model
too (``algorithm.beta``), sharded like the policy: its forwards are collectives as well.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE = Path(sys.executable).parent / "accelerate"
LAUNCH = {"single": "cpu.yaml", "ddp": "ddp_cpu.yaml", "fsdp2": "fsdp_cpu.yaml"}
PRECISION = {"fp32": ("float32", "no"), "bf16_model": ("bfloat16", "no"), "bf16_mixed": ("bfloat16", "bf16")}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ACCELERATE.exists() and shutil.which("accelerate") is None, reason="no accelerate CLI"),
]


@pytest.fixture(scope="module")
def mixed_data(tmp_path_factory):
    """A JSONL in EasyR1's layout: text-only, one image, two images and a video row, then the same again."""
    out = tmp_path_factory.mktemp("mixed")
    subprocess.run(
        [sys.executable, "-m", "mmreason", "data", "examples", "--out", str(out), "--layouts", "easyr1,videor1"],
        check=True,
        capture_output=True,
    )
    pngs = sorted(p.relative_to(out).as_posix() for p in (out / "media").glob("*.png"))
    mp4 = sorted(p.relative_to(out).as_posix() for p in (out / "media").glob("*.mp4"))[0]
    rows = [
        {"problem": "What is two plus two? Answer with a number.", "answer": "4"},
        {"problem": "<image>What colour are the shapes?", "answer": "blue", "images": pngs[:1]},
        {"problem": "<image><image>Are the colours the same? Answer yes or no.", "answer": "no", "images": pngs[1:3]},
        {"problem": "<video>What colour is the moving shape?", "answer": "red", "videos": [mp4]},
    ]
    path = out / "mixed.jsonl"
    path.write_text("".join(json.dumps({"images": [], "videos": [], **r}) + "\n" for r in rows * 2))
    return path


def launch(config: Path, command: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [str(ACCELERATE), "launch", "--config_file", str(config), "-m", "mmreason", *command],
            env=env,
            capture_output=True,
            text=True,
            timeout=420,
            cwd=cwd,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the run did not end (a process waits at a collective): {str(exc.stderr)[-3000:]}")


def accelerate_config(tmp_path: Path, launch_name: str, mixed_precision: str) -> Path:
    """The shipped CPU launcher config with ``mixed_precision`` swapped in."""
    text = (ROOT / "configs" / "accelerate" / LAUNCH[launch_name]).read_text()
    assert 'mixed_precision: "no"' in text
    path = tmp_path / f"{launch_name}_{mixed_precision}.yaml"
    path.write_text(text.replace('mixed_precision: "no"', f'mixed_precision: "{mixed_precision}"'))
    return path


def common(model_dir, out, data: Path, dtype: str) -> list[str]:
    return [
        f"model.name_or_path={model_dir}",
        f"model.dtype={dtype}",
        f"output_dir={out}",
        f"data.train_path={data}",
        "num_threads=1",
        "prompts_per_step=1",
        "mini_batch_size=1",
        "save_steps=0",
        "log_completions_steps=0",
    ]


# One process in fp32 and with a bf16 model is what tests/train/test_train_e2e.py and test_bf16.py run already.
CELLS = [(launch, precision) for launch in LAUNCH for precision in PRECISION]
CELLS = [c for c in CELLS if c not in {("single", "fp32"), ("single", "bf16_model")}]


@pytest.mark.parametrize(("launch_name", "precision"), CELLS)
def test_two_grpo_steps(launch_name, precision, tiny_model_dir, mixed_data, shapes_cache, tmp_path):
    dtype, mixed = PRECISION[precision]
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    args = [
        str(ROOT / "configs" / "generic" / "grpo_tiny.yaml"),
        *common(tiny_model_dir, out, mixed_data, dtype),
        f"data.eval_path={mixed_data}",
        "eval_steps=2",
        "eval_limit=4",
        "max_steps=2",
        "rollout.num_generations=2",
        "rollout.max_completion_length=4",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",  # varies on the random model's output: updates run
        # FSDP2: a reference model too, sharded like the policy (its forwards are collectives, stand-ins matched)
        *(["algorithm.beta=0.04"] if launch_name == "fsdp2" else []),
    ]
    done = launch(accelerate_config(tmp_path, launch_name, mixed), ["train", *args], env, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2], rows
    assert all(r.get("skipped_update", 0) == 0 for r in steps), steps  # no update skipped
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    assert [r["step"] for r in evals] == [0, 2]
    assert all(v == 0 for r in evals for k, v in r.items() if k.endswith("/n_failed")), evals
    assert not (out / "events.log").exists() or "bad_sample" not in (out / "events.log").read_text()
    if launch_name == "fsdp2":
        assert "fsdp2:" in done.stdout and "computed in torch.bfloat16" in done.stdout or precision == "fp32"


@pytest.mark.parametrize("launch_name", ["ddp", "fsdp2"])
def test_sft_on_mixed_modalities(launch_name, tiny_model_dir, mixed_data, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    args = [str(ROOT / "configs" / "generic" / "sft_tiny.yaml"), *common(tiny_model_dir, out, mixed_data, "float32")]
    done = launch(accelerate_config(tmp_path, launch_name, "no"), ["sft", *args, "max_steps=4"], env, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if "loss" in r] == [1, 2, 3, 4]


def test_a_process_with_no_usable_sample_runs_to_the_end(tiny_model_dir, mixed_data, shapes_cache, tmp_path):
    """FSDP2, 2 processes: at step 1 process 1's only prompt names an image that does not exist (a counted bad
    sample), so it has nothing to train on while process 0 does; both skip that update together and step 2 trains."""
    from mmreason.sampling.uniform import UniformSampler

    rows = [json.loads(x) for x in mixed_data.read_text().splitlines()]
    sampler = UniformSampler(len(rows), seed=0)  # the recipe's seed: every process draws the same 2 prompts
    first, second = sampler.next_indices(2), sampler.next_indices(2)
    broken = first[1]  # process 1 takes the second prompt of each step
    rows[broken] = {**rows[broken], "problem": "<image>What is shown?", "images": ["media/no-such.png"], "videos": []}
    assert broken not in second
    data = tmp_path / "broken.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "media").symlink_to(mixed_data.parent / "media")
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "run"
    args = [
        str(ROOT / "configs" / "generic" / "grpo_tiny.yaml"),
        *common(tiny_model_dir, out, data, "float32"),
        "max_steps=2",
        "max_bad_samples=4",
        "rollout.num_generations=2",
        "rollout.max_completion_length=4",
        "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
    ]
    done = launch(accelerate_config(tmp_path, "fsdp2", "no"), ["train", *args], env, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    steps = {r["step"]: r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    assert steps[1].get("skipped_update") == 1.0  # both processes skipped step 1's update together
    events = [json.loads(x) for x in (out / "events.log").read_text().splitlines()]
    assert [(e["rank"], e["event"]) for e in events if e["event"] == "bad_sample"] == [(1, "bad_sample")]
    assert "skipped_update" not in steps[2] and steps[2]["grad_norm"] > 0
