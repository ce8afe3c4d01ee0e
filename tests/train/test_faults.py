"""Faults inside a run: broken media and failing rewards are counted, logged and skipped under their
limits; past a limit the run stops with a clear message after saving a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.tasks.shapes.synth import generate

ROOT = Path(__file__).resolve().parents[2]


def _data_with_broken_images(tmp_path, n_broken: int) -> Path:
    jsonl = generate(tmp_path / "data", 8, seed=1)
    rows = [json.loads(x) for x in jsonl.read_text().splitlines()]
    for row in rows[:n_broken]:
        Path(row["image"]).write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    out = tmp_path / "broken.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def _train(tiny_model_dir, out, *extra):
    return main(
        [
            "train",
            str(ROOT / "configs/quickstart.yaml"),
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={out}",
            "rollout.num_generations=2",
            "rollout.max_completion_length=3",
            "prompts_per_step=4",
            "num_threads=1",
            "save_steps=0",
            "eval_steps=0",
            *extra,
        ]
    )


@pytest.mark.slow
def test_broken_media_is_counted_logged_and_skipped(tiny_model_dir, tmp_path):
    data = _data_with_broken_images(tmp_path, 2)
    out = tmp_path / "run"
    assert _train(tiny_model_dir, out, f"data.train_path={data}", "max_steps=2", "max_bad_samples=10") == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["count/bad_samples"] == 2  # each broken sample met once in 8 draws
    events = [json.loads(x) for x in (out / "events.log").read_text().splitlines()]
    bad = [e for e in events if e["event"] == "bad_sample"]
    assert {e["sample_id"] for e in bad} == {"shapes-0", "shapes-1"}
    assert all("00000.png" in e["reason"] or "00001.png" in e["reason"] for e in bad)
    assert (out / "checkpoint-2").exists()


@pytest.mark.slow
def test_too_many_broken_samples_stop_the_run_after_a_checkpoint(tiny_model_dir, tmp_path, capsys):
    data = _data_with_broken_images(tmp_path, 6)
    out = tmp_path / "run"
    code = _train(tiny_model_dir, out, f"data.train_path={data}", "max_steps=4", "max_bad_samples=3")
    assert code == 2
    err = capsys.readouterr().err
    assert "max_bad_samples=3" in err and "checkpoint" in err
    assert list(out.glob("checkpoint-*")), "no checkpoint saved before stopping"


@pytest.mark.slow
def test_failing_reward_calls_are_counted_and_limited(tiny_model_dir, shapes_cache, tmp_path, capsys):
    rewards_file = tmp_path / "my_rewards.py"
    rewards_file.write_text(
        "def flaky(prompts, completions, answer, **kw):\n"
        "    if len(completions) > 1:\n"
        "        raise RuntimeError('batch call fails')\n"
        "    return [1.0 if 'e' in completions[0] else 0.0]\n"
        "def broken(prompts, completions, **kw):\n"
        "    raise ValueError('always fails')\n"
    )
    out = tmp_path / "ok"
    assert _train(tiny_model_dir, out, "max_steps=1", f"rewards=[{{name: {rewards_file}:flaky}}]") == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert "rewards/flaky/mean" in rows[0]
    out = tmp_path / "stop"
    # 4 prompts x 2 rollouts = 8 failed calls per step: step 1 stays under the limit, step 2 passes it.
    code = _train(
        tiny_model_dir,
        out,
        "max_steps=3",
        "max_reward_errors=12",
        f"rewards=[{{name: {rewards_file}:broken}}, {{name: anls}}]",
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "max_reward_errors=12" in err and "always fails" in err
    events = [json.loads(x) for x in (out / "events.log").read_text().splitlines()]
    assert any(e["event"] == "reward_error" and "always fails" in json.dumps(e) for e in events)
    # The checkpoint is the last step that finished, with the sampler as it was before the failed step's
    # draws, so resuming replays step 2's prompts.
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    state = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["step"] == 1 and state["sampler"]["position"] == 4  # 4 prompts drawn by step 1
