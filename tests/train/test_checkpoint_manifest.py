"""Checkpoint manifests stay inside their folder: an entry that leads out of it (``../../x``, ``/etc/passwd``) or
is malformed (``"bytes": null``, an entry ``5``) marks the checkpoint damaged without reading the outside file;
only regular files are opened (a FIFO as ``trainer_state.json`` or ``checksums.json`` never hangs resume); an
older checkpoint without checksums whose RNG state cannot be set, or a sampler state the run cannot restore, is
found damaged before anything is applied. Each time ``resume=auto`` falls back to the previous checkpoint and ends with the weights of a run never
damaged (the fallback replays step 2 exactly)."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmreason.cli import main
from mmreason.train.checkpoint_verify import MANIFEST, write_manifest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
OUTSIDE_BYTES = 12_345  # the size of a file outside the checkpoint: never read, never said


def _train(model_dir, out, *extra) -> int:
    return main(
        [
            "train",
            QUICKSTART,
            f"model.name_or_path={model_dir}",
            f"output_dir={out}",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
            "rollout.num_generations=2",
            "rollout.max_completion_length=3",
            "prompts_per_step=2",
            "num_threads=1",
            "eval_steps=0",
            "log_completions_steps=0",
            "max_steps=2",
            "save_steps=1",
            "save_total_limit=3",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def straight(tiny_model_dir, shapes_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("straight") / "run"
    assert _train(tiny_model_dir, out) == 0
    return out


def _edit_manifest(ckpt: Path, change) -> None:
    manifest = json.loads((ckpt / MANIFEST).read_text())
    change(manifest["files"])
    (ckpt / MANIFEST).write_text(json.dumps(manifest))


def _outside(files):
    files["../../outside.bin"] = {"bytes": 1, "sha256": "0" * 64}


def _fifo(ckpt: Path, name: str) -> None:
    (ckpt / name).unlink()
    os.mkfifo(ckpt / name)


def _unsettable_rng(ckpt: Path) -> None:
    (ckpt / MANIFEST).unlink()  # written before checksums: only the part's own check can catch it
    torch.save([{"torch": torch.get_rng_state(), "numpy": {"kind": "MT19937"}}], ckpt / "rng_state.pt")


def _bad_sampler_state(ckpt: Path) -> None:
    state = json.loads((ckpt / "trainer_state.json").read_text())
    state["sampler"] = {"epoch": "first", "position": 0}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    write_manifest(ckpt)  # checksums that match: only the trial restore can catch it


DAMAGES = {
    "entry ../../x": (lambda c: _edit_manifest(c, _outside), "not a path inside the checkpoint"),
    "entry /etc/passwd": (
        lambda c: _edit_manifest(c, lambda f: f.update({"/etc/passwd": {"bytes": 1, "sha256": "0" * 64}})),
        "not a path inside the checkpoint",
    ),
    "bytes: null": (
        lambda c: _edit_manifest(c, lambda f: f["optimizer.pt"].update(bytes=None)),
        "the size of 'optimizer.pt' is None",
    ),
    "an entry 5": (
        lambda c: _edit_manifest(c, lambda f: f.update({"optimizer.pt": 5})),
        "the entry of 'optimizer.pt' is not an object",
    ),
    "FIFO trainer_state.json": (lambda c: _fifo(c, "trainer_state.json"), "trainer_state.json is not a regular file"),
    "FIFO checksums.json": (lambda c: _fifo(c, MANIFEST), "checksums.json is not a regular file"),
    "no checksums, RNG state that cannot be set": (_unsettable_rng, "RNG state that cannot be set"),
    "a sampler state that cannot be restored": (_bad_sampler_state, "holds a state this run cannot restore"),
}


def _alarm(signum, frame):
    raise TimeoutError("resume hung (a FIFO read?)")


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_resume_auto_falls_back_past_a_bad_manifest_or_part(straight, tiny_model_dir, tmp_path, capsys, damage):
    hurt, words = DAMAGES[damage]
    out = tmp_path / "a" / "run"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "outside.bin").write_bytes(b"x" * OUTSIDE_BYTES)  # what ../../outside.bin names
    shutil.copytree(straight, out)
    hurt(out / "checkpoint-2")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(120)
    try:
        assert _train(tiny_model_dir, out, "resume=auto") == 0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    said = capsys.readouterr().out
    assert "resume=auto:" in said and "checkpoint-2" in said and words in said, said
    assert "fell back to checkpoint-1" in said and f"{OUTSIDE_BYTES:,}" not in said
    assert (out / "checkpoint-2.damaged").is_dir()
    a = load_file(straight / "checkpoint-2" / "model" / "model.safetensors")
    b = load_file(out / "checkpoint-2" / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_damaged_checkpoint_leaves_the_live_run_untouched(straight, tiny_model_dir, tmp_path):
    """Read whole and checked first: weights, optimizer and RNG are as they were when a part is bad."""
    from mmreason.config import load_config
    from mmreason.train.checkpoint import load_checkpoint
    from mmreason.train.checkpoint_verify import DamagedCheckpoint
    from mmreason.train.config import TrainConfig
    from mmreason.train.setup import setup_run

    ckpt = tmp_path / "checkpoint-2"
    shutil.copytree(straight / "checkpoint-2", ckpt)
    _unsettable_rng(ckpt)
    cfg = load_config(
        TrainConfig,
        QUICKSTART,
        [f"model.name_or_path={tiny_model_dir}", f"output_dir={tmp_path / 'o'}", "num_threads=1"],
    )
    run = setup_run(cfg, with_rewards=False, verbose=False)
    weights = {k: v.clone() for k, v in run.model.state_dict().items()}
    rng = torch.get_rng_state()
    with pytest.raises(DamagedCheckpoint, match="RNG state that cannot be set"):
        load_checkpoint(ckpt, run.accelerator, run.model, run.optimizer, run.scheduler)
    assert all(torch.equal(v, weights[k]) for k, v in run.model.state_dict().items())
    assert not run.optimizer.state and torch.equal(torch.get_rng_state(), rng)
