"""End to end through the real `mmreason train` / `sft` / `plot` entry points on the tiny model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


# The random tiny model never answers a colour exactly, so these mechanics tests score it with a reward that
# varies on its output (ANLS with no threshold: partial credit) to get non-zero advantages.
VARYING_REWARDS = "rewards=[{name: anls, kwargs: {threshold: 0.0}}]"


def _train(tiny_model_dir, out, *extra, command="train"):
    args = [
        command,
        QUICKSTART,
        f"model.name_or_path={tiny_model_dir}",
        f"output_dir={out}",
        VARYING_REWARDS,
        "rollout.num_generations=4",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "log_completions_steps=1",
        "num_threads=1",
        "eval_steps=0",
        *extra,
    ]
    assert main(args) == 0


def _weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model" / "model.safetensors")


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_train_logs_checkpoints_and_changes_parameters(tiny_model_dir, shapes_cache, tmp_path):
    out = tmp_path / "run"
    _train(tiny_model_dir, out, "max_steps=3", "save_steps=2")
    rows = _metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in (
        "reward/mean",
        "reward/std",
        "rewards/anls/mean",
        "frac_reward_zero_std",
        "completion/length_mean",
        "completion/length_max",
        "completion/clipped_ratio",
        "entropy",
        "time/prompts",
        "time/generate",
        "time/reward",
        "time/update",
        "time/other",
        "loss",
        "grad_norm",
    ):
        assert key in rows[-1], key
    assert (out / "config.yaml").exists() and (out / "curves.png").stat().st_size > 1000
    completions = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    assert completions and {"completion", "reward", "advantage", "rewards"} <= set(completions[0])
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    before = load_file(Path(tiny_model_dir) / "model.safetensors")
    after = _weights(out / "checkpoint-3")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "training did not change any parameter"


@pytest.mark.slow
def test_resume_continues_the_same_sequence(tiny_model_dir, shapes_cache, tmp_path):
    straight = tmp_path / "straight"
    _train(tiny_model_dir, straight, "max_steps=4", "save_steps=2", "save_total_limit=3")
    # The same run stopped after its step-2 checkpoint (a half-written save left behind), then resumed.
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-2", resumed / "checkpoint-2")
    (resumed / "checkpoint-4.tmp").mkdir()  # a save killed midway must be ignored
    _train(tiny_model_dir, resumed, "max_steps=4", "save_steps=2", "resume=auto")
    a, b = _weights(straight / "checkpoint-4"), _weights(resumed / "checkpoint-4")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert _weights(straight / "checkpoint-2").keys() == a.keys()
    assert not torch.equal(_weights(straight / "checkpoint-2")["lm_head.weight"], a["lm_head.weight"])


@pytest.mark.slow
def test_sft_trains_on_assistant_tokens(tiny_model_dir, shapes_cache, tmp_path):
    out = tmp_path / "sft"
    _train(tiny_model_dir, out, "max_steps=8", "save_steps=0", "learning_rate=1e-2", command="sft")
    rows = _metrics(out)
    assert len(rows) == 8
    first, last = rows[0]["loss"], rows[-1]["loss"]
    assert last < first * 0.8, (first, last)  # imitation of one-word answers is quickly learnable
    assert (out / "checkpoint-8" / "model" / "model.safetensors").exists()


def test_plot_reads_a_run_dir(tmp_path, capsys):
    rows = [{"step": i, "reward/mean": i / 10, "loss": 1 - i / 10} for i in range(1, 6)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["plot", str(tmp_path)]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert main(["plot", str(tmp_path / "nope")]) == 2


@pytest.mark.slow
def test_quickstart_learns_to_read_the_colour_on_held_out_images(
    tiny_model_dir, shapes_cache, tmp_path, one_torch_thread
):
    """The README's main job (SFT warm-up, then GRPO), with GRPO shortened to 20 steps: the held-out accuracy
    of the in-training eval (images never trained on) ends >= 0.8, above where the warm-up left it and above
    the best image-blind answer; `mmreason eval` on the run directory agrees; the answers are colour words."""
    from mmreason.tasks.shapes.data import shapes_load
    from mmreason.tasks.shapes.synth import COLOURS

    sft = tmp_path / "sft"
    assert (
        main(
            [
                "sft",
                str(ROOT / "configs" / "quickstart_sft.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={sft}",
            ]
        )
        == 0
    )
    out = tmp_path / "grpo"
    assert (
        main(
            [
                "train",
                QUICKSTART,
                f"model.name_or_path={sft}/checkpoint-30/model",
                f"output_dir={out}",
                "max_steps=20",
                "save_steps=0",
                "eval_steps=10",
            ]
        )
        == 0
    )
    held_out = {r["step"]: r["eval/shapes/accuracy"] for r in _metrics(out) if "eval/shapes/accuracy" in r}
    assert sorted(held_out) == [0, 10, 20]
    answers = [s.answer for s in shapes_load(split="eval")]
    blind = max(answers.count(c) for c in COLOURS) / len(answers)  # always the most frequent colour
    assert held_out[20] >= 0.8 and held_out[20] > held_out[0] and held_out[20] > blind + 0.3, (held_out, blind)
    greedy = [json.loads(line)["response"] for line in (out / "eval" / "step-20_samples_shapes.jsonl").open()]
    assert set(greedy) <= set(COLOURS) and len(set(greedy)) == len(COLOURS)  # every answer a colour, all used
    results = tmp_path / "results"
    assert main(["eval", "--model", str(out), "--tasks", "shapes", "--output_path", str(results)]) == 0
    report = json.loads(next(results.rglob("*_results.json")).read_text())
    assert report["results"]["shapes"]["accuracy,none"] == pytest.approx(held_out[20])


@pytest.mark.slow
def test_gradient_checkpointing_trains_with_and_without_the_shared_prefix(tiny_model_dir, shapes_cache, tmp_path):
    """A step with model.gradient_checkpointing takes the shared prefix too and equals the same step without
    checkpointing, and both equal the plain path's step, packed (``padding_free``, the default) and padded; all
    change the parameters."""
    weights = {}
    for name, extra in (
        ("shared", ()),
        ("checkpointed", ("model.gradient_checkpointing=true",)),
        ("plain", ("shared_prefix=false",)),
        ("padded", ("shared_prefix=false", "padding_free=false")),
    ):
        out = tmp_path / name
        _train(tiny_model_dir, out, "max_steps=1", "save_steps=0", "max_grad_norm=1e9", *extra)
        weights[name] = _weights(out / "checkpoint-1")
        row = _metrics(out)[0]
        assert row["grad_norm"] > 0 and row["update/shared_prefix"] == float(name not in ("plain", "padded"))
        assert row["update/padding_free"] == float(name == "plain")
    for k in weights["plain"]:
        torch.testing.assert_close(weights["plain"][k], weights["padded"][k], atol=1e-5, rtol=0, msg=k)
        # Adam's first step is about lr * sign(gradient) (lr 1e-3): where a gradient is near zero (a key bias:
        # softmax cancels it) rounding differences of the two paths grow to ~1e-6; a wrong prefix moves far more
        torch.testing.assert_close(weights["shared"][k], weights["plain"][k], atol=1e-5, rtol=0, msg=k)
        torch.testing.assert_close(weights["checkpointed"][k], weights["shared"][k], atol=1e-6, rtol=0, msg=k)
