"""A run directory belongs to one run: a second run into a used ``output_dir`` is refused (unless it resumes or
``overwrite_output_dir=true``), a folder that was never a run keeps its files, a run writing there holds a lock
(a live holder refuses the next run, a dead one's lock is taken over with a warning), rotation deletes only the
checkpoints this run wrote; an evaluation locks the run it writes, so two of the same command never resume the
same pending run together."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.eval.output import RunFiles
from mmreason.rundir import LOCK_FILE, RunDirError, claim_output_dir

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _args(model_dir, out, *extra, command="train") -> list[str]:
    return [
        command,
        QUICKSTART,
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        "max_steps=2",
        "save_steps=1",
        "save_total_limit=1",
        "prompts_per_step=2",
        "rollout.num_generations=2",
        "rollout.max_completion_length=3",
        "num_threads=1",
        "eval_steps=0",
        "log_completions_steps=0",
        *extra,
    ]


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _last_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1] if lines else ""


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def used(tiny_model_dir, shapes_cache, tmp_path_factory):
    """A finished two-step run (checkpoint-2 kept: save_total_limit 1)."""
    out = tmp_path_factory.mktemp("used") / "run"
    assert main(_args(tiny_model_dir, out)) == 0
    return out


@pytest.mark.parametrize("command", ["train", "sft"])
def test_a_second_run_into_a_used_output_dir_is_refused_and_changes_nothing(used, tiny_model_dir, capsys, command):
    before = _snapshot(used)
    assert main(_args(tiny_model_dir, used, command=command)) == 2
    last = _last_error(capsys)
    assert last.startswith(f"mmreason {command}: error: output_dir") and "is not empty" in last, last
    assert "checkpoint-2" in last and "resume=auto" in last and "overwrite_output_dir=true" in last, last
    assert _snapshot(used) == before and not (used / LOCK_FILE).exists()  # nothing written, the lock given back


def test_a_folder_that_was_never_a_run_keeps_its_files_and_rotation_spares_them(
    tiny_model_dir, shapes_cache, tmp_path, capsys
):
    out = tmp_path / "mine"
    hf = out / "checkpoint-9"  # another trainer's checkpoint (HF Trainer writes a trainer_state.json too)
    hf.mkdir(parents=True)
    (hf / "trainer_state.json").write_text(json.dumps({"global_step": 9, "log_history": []}))
    (out / "config.yaml").write_text("mine: true\n")
    (out / "notes.txt").write_text("keep me\n")
    before = _snapshot(out)
    assert main(_args(tiny_model_dir, out)) == 2
    assert "is not empty" in _last_error(capsys) and _snapshot(out) == before
    # Told to overwrite: the run starts, and rotation (save_total_limit 1) never counts or deletes checkpoint-9.
    assert main(_args(tiny_model_dir, out, "overwrite_output_dir=true")) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-9"]
    assert (hf / "trainer_state.json").read_bytes() == before["checkpoint-9/trainer_state.json"]
    assert (out / "notes.txt").read_text() == "keep me\n"


def test_overwrite_replaces_the_earlier_run_and_resume_continues_its_rotation(used, tiny_model_dir, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(used, out)
    first_id = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())["run_id"]
    # resume=auto continues the same run: its id, so its own checkpoint-2 rotates away (limit 1)
    assert main(_args(tiny_model_dir, out, "resume=auto", "max_steps=3")) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3"]
    assert json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["run_id"] == first_id
    assert main(_args(tiny_model_dir, out, "overwrite_output_dir=true", "max_steps=1")) == 0
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]  # the earlier run's went first
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1]  # not mixed
    assert json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["run_id"] != first_id


def test_a_run_in_progress_holds_the_folder(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "busy"
    held = claim_output_dir(out, resume=None, overwrite=False)  # as a running `mmreason train` holds it
    try:
        assert main(_args(tiny_model_dir, out, "resume=auto")) == 2
        last = _last_error(capsys)
        assert "in use by another run" in last and f"pid {os.getpid()}" in last, last
        assert socket.gethostname() in last
    finally:
        held.release()
    assert not (out / LOCK_FILE).exists()


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_warning(tmp_path, caplog):
    out = tmp_path / "killed"
    out.mkdir()
    dead = _dead_pid()
    (out / LOCK_FILE).write_text(json.dumps({"pid": dead, "host": socket.gethostname(), "started": 0}))
    with caplog.at_level(logging.WARNING, logger="mmreason.rundir"):
        claimed = claim_output_dir(out, resume="auto", overwrite=False)
    try:
        assert any(f"pid {dead}" in r.getMessage() and "taking over" in r.getMessage() for r in caplog.records)
        assert json.loads((out / LOCK_FILE).read_text())["pid"] == os.getpid()
    finally:
        claimed.release()


def test_two_evaluations_of_one_command_never_resume_the_same_run(tmp_path, caplog):
    config = {"model": "m", "seed": 1}
    first = RunFiles.open(tmp_path, "m", config, lock=True)  # an evaluation running (its run pending)
    try:
        with pytest.raises(RunDirError, match=rf"pid {os.getpid()} on host"):
            RunFiles.open(tmp_path, "m", config, lock=True)
    finally:
        first.close()
    again = RunFiles.open(tmp_path, "m", config, lock=True)  # the first one ended without finishing: resume it
    try:
        assert again.resumed and again.stamp == first.stamp
    finally:
        again.close()
    # Two starting in the same second take two timestamps, never one
    a = RunFiles.open(tmp_path / "new", "m", {"k": 1}, lock=True)
    b = RunFiles.open(tmp_path / "new", "m", {"k": 2}, lock=True)
    assert a.stamp != b.stamp
    a.close()
    b.close()
