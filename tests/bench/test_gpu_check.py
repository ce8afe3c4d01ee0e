"""scripts/gpu_check.sh and its table (mmreason/bench/gpu_check.py): the table of a run's results and the exit
status; the commands a GPU run makes (a dry run: each parses with the real CLI and names recipes and accelerate
configs that exist); and the parts that run on a CPU, the main job's path and the bench, with every package a
lent GPU machine lacks made unimportable, read back by the figure commands the script runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mmreason.bench import gpu_check

ROOT = Path(__file__).resolve().parents[2]
GPU_CHECKS = ["install", "cuda-tests", "main-job", "accelerate-bf16", "fsdp2-1proc", "grpo-7b", "vllm-colocate"]
# The project's dependencies and extras that the GPU machine's image lacks (scripts/gpu_wheels.sh carries some).
ABSENT = (
    "datasets decord av pypdfium2 qwen_vl_utils math_verify latex2sympy2_extended orjson easy_vqa rank_bm25 trl "
    "gensim vega_datasets pydicom pydicom_data skvideo vllm flash_attn deepspeed liger_kernel"
).split()


def _write(folder: Path, rows: list[tuple[str, int, float]], files: dict[str, str] | None = None) -> Path:
    """A results folder as gpu_check.sh leaves it: results.tsv and the checks' figure and log files."""
    folder.mkdir(exist_ok=True)
    (folder / "results.tsv").write_text("".join(f"{n}\t{rc}\t{s}\n" for n, rc, s in rows))
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    return folder


def test_the_table_has_a_row_per_check_with_its_status_time_and_figure_and_fails_on_a_failure(tmp_path, capsys):
    log = "step 1\nTraceback (most recent call last):\nRuntimeError: expected m1 and m2 to have the same dtype\nbye\n"
    folder = _write(
        tmp_path / "run",
        [("main-job", 0, 96.4), ("accelerate-bf16", 1, 21.0), ("fsdp2-1proc", 124, 90.0), ("grpo-7b", 77, 0)],
        {
            "main-job.figure": "held-out shapes accuracy 1.00 at step 60 (bar 0.95)\n",
            "accelerate-bf16.log": log,
            "fsdp2-1proc.figure": "",
            "grpo-7b.figure": "needs CUDA",
        },
    )
    results = gpu_check.read_results(folder)
    assert gpu_check.render(results).splitlines() == [
        "| check | status | time | key figure |",
        "|---|---|---|---|",
        "| main-job | pass | 96 s | held-out shapes accuracy 1.00 at step 60 (bar 0.95) |",
        "| accelerate-bf16 | fail | 21 s | RuntimeError: expected m1 and m2 to have the same dtype |",
        "| fsdp2-1proc | fail | 90 s | timed out after 90 s |",
        "| grpo-7b | skip | 0 s | needs CUDA |",
        "| total | 2 failed | 207 s | 1 passed, 1 skipped |",
    ]
    assert gpu_check.exit_code(results) == 1
    assert gpu_check.main(["table", str(folder)]) == 1
    assert "| accelerate-bf16 | fail |" in capsys.readouterr().out
    passing = _write(tmp_path / "ok", [("main-job", 0, 9.0), ("cuda-tests", 77, 0)])
    assert gpu_check.main(["table", str(passing)]) == 0
    assert gpu_check.exit_code([]) == 1  # nothing ran: not a pass
    (passing / "results.tsv").write_text("main-job\t0\n")
    with pytest.raises(ValueError, match=r"results.tsv: line 1: expected name<TAB>exit status<TAB>seconds"):
        gpu_check.read_results(passing)


def _dry_run(tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable}
    script = ROOT / "scripts" / "gpu_check.sh"
    return subprocess.run(
        ["bash", str(script), "--dry-run", str(tmp_path / "dry")], env=env, capture_output=True, text=True, timeout=60
    )


def _check_command(argv: list[str], bad: list[str]) -> None:
    """A ``python -m ...`` line of the dry run: mmreason commands parse, and name recipes and configs that load."""
    from mmreason.cli import build_parser
    from mmreason.config import load_config
    from mmreason.train.config import TrainConfig

    module, rest = argv[2], argv[3:]
    if module == "accelerate.commands.launch":
        config = yaml.safe_load((ROOT / rest[1]).read_text())
        assert rest[0] == "--config_file" and config["num_processes"] == 1 and config["mixed_precision"] == "bf16"
        assert config["distributed_type"] == "NO" or config["fsdp_config"]["fsdp_version"] == 2
        module, rest = rest[3], rest[4:]
    if module == "mmreason":
        try:
            args = build_parser(rest[0]).parse_args(rest)
        except SystemExit:
            bad.append(shlex.join(argv))
            return
        if rest[0] in ("train", "sft"):
            load_config(TrainConfig, ROOT / args.config, list(args.overrides))
    elif module == "mmreason.bench.gpu_check":  # the figure commands
        assert rest[0] in ("accuracy", "steps", "bench")


def test_a_dry_run_prints_every_gpu_check_with_commands_that_parse(tmp_path):
    out = _dry_run(tmp_path)
    assert out.returncode == 0, out.stderr
    table = [line.split(" | ") for line in out.stdout.splitlines() if line.startswith("| ") and "---" not in line]
    assert [row[0].removeprefix("| ") for row in table[1:-1]] == GPU_CHECKS
    assert all(row[1] == "skip" and row[3] == "dry run |" for row in table[1:-1])
    logs = [line for f in (tmp_path / "dry").glob("*.log") for line in f.read_text().splitlines()]
    commands = [shlex.split(line[2:]) for line in logs if line.startswith("+ ")]
    python = [c for c in commands if c[:2] == [sys.executable, "-m"]]
    bad: list[str] = []
    for argv in python:
        _check_command(argv, bad)
    assert not bad, bad
    runs = {tuple(c[3:5]) for c in python}
    assert {("tiny-model", str(tmp_path / "dry" / "tiny-model")), ("bench", "grpo-shape")} <= runs
    launched = [c for c in python if c[2] == "accelerate.commands.launch"]
    assert sorted(c[4] for c in launched) == ["configs/accelerate/fsdp_gpu1.yaml", "configs/accelerate/gpu1_bf16.yaml"]
    main_job = [c for c in python if c[3:4] in (["sft"], ["train"]) and c[2] == "mmreason"]
    assert [c[3] for c in main_job] == ["sft", "train"]
    assert all("model.dtype=bfloat16" in c for c in main_job)  # the main job in bf16
    assert "max_steps=30" in main_job[0] and "max_steps=60" in main_job[1]  # the README's, in full
    assert [c for c in python if "--min" in c][0][-2:] == ["--min", "0.95"]


# Each absent package as if not installed: `import` raises ModuleNotFoundError, importlib.util.find_spec (the
# probe accelerate and transformers make) returns None.
_BLOCKED_RUN = """
import sys
sys.modules.update(dict.fromkeys(sys.argv[1].split(",")))
from mmreason.cli import main
for argv in sys.argv[2:]:
    if main(argv.split(" ")) != 0:
        sys.exit(f"failed: mmreason {argv}")
"""


@pytest.mark.slow
def test_the_main_job_and_the_bench_run_without_what_a_gpu_machine_lacks(
    tiny_model_dir, shapes_cache, tmp_path, capsys
):
    sft, grpo, bench = tmp_path / "sft", tmp_path / "grpo", tmp_path / "bench.json"
    runs = [
        f"sft configs/quickstart_sft.yaml model.name_or_path={tiny_model_dir} output_dir={sft} model.dtype=bfloat16 "
        "max_steps=1 prompts_per_step=2",
        f"train configs/quickstart.yaml model.name_or_path={sft}/checkpoint-1/model output_dir={grpo} "
        "model.dtype=bfloat16 max_steps=1 eval_steps=1 eval_limit=2 save_steps=0 prompts_per_step=2 "
        "rollout.num_generations=2",
        f"bench grpo-shape --shape tiny --steps 2 --image-tokens 4 --prompt-text 8 --max-new-tokens 4 --json {bench}",
    ]
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED_RUN, ",".join(ABSENT), *runs],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    # the figures gpu_check.sh shows, read from what the runs wrote
    assert gpu_check.main(["accuracy", str(grpo), "--min", "0"]) == 0
    assert capsys.readouterr().out.startswith("held-out shapes accuracy ")
    assert gpu_check.main(["accuracy", str(grpo), "--min", "1.01"]) == 1  # under the bar: the check fails
    assert "(bar 1.01)" in capsys.readouterr().out
    assert gpu_check.main(["steps", str(grpo), "--expect", "1"]) == 0
    assert capsys.readouterr().out.startswith("1 of 1 steps, loss ")
    assert gpu_check.main(["steps", str(grpo), "--expect", "2"]) == 1
    capsys.readouterr()
    assert gpu_check.main(["accuracy", str(sft)]) == 1  # no held-out row: a failure naming the file
    assert "metrics.jsonl" in capsys.readouterr().err
    figures = json.loads(bench.read_text())
    assert len(figures["steps"]) == 2 and figures["shape"] == "tiny"
    assert gpu_check.main(["bench", str(bench)]) == 0
    assert "M params: step " in capsys.readouterr().out
