"""A damaged newest checkpoint: ``resume=auto`` says so and falls back to the previous complete one (and the
run then ends with the same weights as a run never interrupted); ``resume=PATH`` to it is a clear error.

Each damage from the issue is tried twice where it matters: as it is (the checksums written last catch it)
and with the checksum list rewritten to match (the part's own check must catch it)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mmreason.cli import main
from mmreason.train.checkpoint_verify import MANIFEST, write_manifest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _train(model_dir, out, *extra) -> int:
    return main(
        [
            "train",
            QUICKSTART,
            f"model.name_or_path={model_dir}",
            f"output_dir={out}",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
            "rollout.num_generations=4",
            "rollout.max_completion_length=4",
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
    torch.set_num_threads(1)
    assert _train(tiny_model_dir, out) == 0
    return out


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model" / "model.safetensors")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _edit_state(ckpt: Path, **changes) -> None:
    state = json.loads((ckpt / "trainer_state.json").read_text())
    (ckpt / "trainer_state.json").write_text(json.dumps({**state, **changes}))


def _same_size_edit(ckpt: Path) -> None:
    text = (ckpt / "trainer_state.json").read_text()
    assert '"step": 2,' in text
    (ckpt / "trainer_state.json").write_text(text.replace('"step": 2,', '"step": 7,'))


def _wrong_optimizer_shape(ckpt: Path) -> None:
    state = torch.load(ckpt / "optimizer.pt", weights_only=True)
    first = next(iter(state["state"].values()))
    first["exp_avg"] = torch.zeros(3, 5)
    torch.save(state, ckpt / "optimizer.pt")


def _nan_weight(ckpt: Path) -> None:
    weights = _weights(ckpt)
    name = next(k for k in weights if "lm_head" in k or "embed_tokens" in k)
    weights[name][0, 0] = math.nan
    save_file(weights, ckpt / "model" / "model.safetensors", metadata={"format": "pt"})


# name -> (damage to checkpoint-2, rewrite the checksums afterwards?, words the report must hold)
DAMAGES = {
    "truncated model.safetensors": (lambda c: _truncate(c / "model" / "model.safetensors"), False, "model.safetensors"),
    "truncated model.safetensors, checksums matching": (
        lambda c: _truncate(c / "model" / "model.safetensors"),
        True,
        "weights cannot be read",
    ),
    "truncated optimizer.pt": (lambda c: _truncate(c / "optimizer.pt"), False, "optimizer.pt"),
    "truncated optimizer.pt, checksums matching": (
        lambda c: _truncate(c / "optimizer.pt"),
        True,
        "optimizer.pt cannot",
    ),
    "zero-byte optimizer.pt": (lambda c: (c / "optimizer.pt").write_bytes(b""), True, "optimizer.pt cannot"),
    "empty RNG list": (lambda c: torch.save([], c / "rng_state.pt"), True, "rng_state.pt holds no RNG"),
    "bad trainer-state JSON": (
        lambda c: (c / "trainer_state.json").write_text('{"step": 2, "sampler": '),
        True,
        "not valid JSON",
    ),
    "optimizer state of the wrong shape": (_wrong_optimizer_shape, True, "has shape (3, 5)"),
    "step: 1e9": (lambda c: _edit_state(c, step=1e9), True, "says step 1000000000.0"),
    "NaN weight": (_nan_weight, True, "holds NaN or inf"),
    "trainer state altered after writing": (_same_size_edit, False, "trainer_state.json does not match its checksum"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_resume_auto_falls_back_past_a_damaged_checkpoint(straight, tiny_model_dir, tmp_path, capsys, damage):
    hurt, rewrite, words = DAMAGES[damage]
    out = tmp_path / "run"
    shutil.copytree(straight, out)
    hurt(out / "checkpoint-2")
    if rewrite:
        write_manifest(out / "checkpoint-2")
    torch.set_num_threads(1)
    assert _train(tiny_model_dir, out, "resume=auto") == 0
    said = capsys.readouterr().out
    assert "resume=auto:" in said and "checkpoint-2" in said and words in said, said
    assert "fell back to checkpoint-1" in said and "resumed from" in said and "at step 1" in said
    assert (out / "checkpoint-2.damaged").is_dir()  # kept to inspect, out of the rotation
    # Resumed from step 1, the run replays step 2 exactly: the same weights as the run never damaged.
    a, b = _weights(straight / "checkpoint-2"), _weights(out / "checkpoint-2")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_explicit_damaged_checkpoint_is_an_error(straight, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(straight, out)
    _truncate(out / "checkpoint-2" / "optimizer.pt")
    assert _train(tiny_model_dir, out, f"resume={out / 'checkpoint-2'}") == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("mmreason train: error: ") and "checkpoint-2: optimizer.pt is" in last, last
    assert (out / "checkpoint-2").is_dir()  # an explicit path is never renamed


def test_every_checkpoint_damaged_is_an_error(straight, tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(straight, out)
    for ckpt in ("checkpoint-1", "checkpoint-2"):
        (out / ckpt / "optimizer.pt").write_bytes(b"")
    assert _train(tiny_model_dir, out, "resume=auto") == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "every checkpoint" in last and "checkpoint-2, checkpoint-1" in last and "damaged" in last, last


def test_a_checkpoint_without_checksums_still_resumes(straight, tiny_model_dir, tmp_path, capsys):
    # Written before checksums existed: every other check still runs, and an intact one resumes.
    out = tmp_path / "run"
    shutil.copytree(straight, out)
    (out / "checkpoint-2" / MANIFEST).unlink()
    assert _train(tiny_model_dir, out, "resume=auto", "max_steps=2") == 0
    assert "resumed from" in capsys.readouterr().out and not (out / "checkpoint-2.damaged").exists()


def test_checksums_are_written_last_and_cover_every_file(straight):
    ckpt = straight / "checkpoint-2"
    listed = set(json.loads((ckpt / MANIFEST).read_text())["files"])
    on_disk = {str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file() and p.name != MANIFEST}
    assert listed == on_disk and {"optimizer.pt", "trainer_state.json", "model/model.safetensors"} <= listed
    newest = max(on_disk, key=lambda name: (ckpt / name).stat().st_mtime_ns)
    assert (ckpt / MANIFEST).stat().st_mtime_ns >= (ckpt / newest).stat().st_mtime_ns
