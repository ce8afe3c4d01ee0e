"""The videoqa recipes end to end on the tiny model: the tiny Reg-GRPO recipe trains 2 steps through the CLI,
broken videos inside a run are counted and logged skips, and `mmreason eval --tasks videoqa:PATH` reports the
per-type accuracies and span metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from videoqa_helpers import truncated_video

from mmreason.cli import main
from mmreason.config import load_config
from mmreason.taskpack import TASKS
from mmreason.tasks.videoqa.synth import generate
from mmreason.train.config import TrainConfig
from mmreason.train.setup import run_rewards

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "videoqa"
OURS = sorted(CONFIGS.glob("videoqa_*.yaml"))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("videoqa") / "d", 3, seed=5, seconds=(3, 4), size=64)


def _train(config: str, model, out: Path, *extra: str) -> None:
    assert (
        main(
            [
                "train",
                str(CONFIGS / config),
                f"model.name_or_path={model}",
                f"output_dir={out}",
                "num_threads=1",
                *extra,
            ]
        )
        == 0
    )


@pytest.mark.parametrize("path", OURS, ids=[p.name for p in OURS])
def test_recipes_load(path):
    cfg = load_config(TrainConfig, path)
    assert cfg.data.task == "videoqa"
    if "_sft" in path.stem:  # an SFT stage: no reward, no policy loss
        assert cfg.num_threads == 1 and cfg.data.task_args.get("style") == "basic"
        return
    assert run_rewards(cfg, TASKS.get(cfg.data.task))[0].name == "mmreason.tasks.videoqa.scoring:videoqa_accuracy"
    reg = "reg_grpo" in path.stem
    assert cfg.algorithm.policy_loss == ("reg_grpo" if reg else "clipped")
    # Reg-GRPO with one update per batch is a scaled GRPO gradient: every recipe reuses each batch
    assert cfg.algorithm.num_iterations * cfg.steps_per_generation >= 2
    if reg:
        assert cfg.algorithm.loss_options == {"eps_r": 0.01}
    if path.stem.startswith("videoqa_learn_"):  # stage 2 of the learning check: from the SFT stage's checkpoint
        assert cfg.model.name_or_path == "runs/videoqa_learn_sft_tiny/checkpoint-1200/model"
    elif path.stem.endswith("_tiny"):
        assert cfg.num_threads == 1 and cfg.model.name_or_path == "runs/tiny-model"


@pytest.mark.slow
def test_tiny_reg_grpo_trains_two_steps(tiny_model_dir, shapes_cache, tmp_path, data, one_torch_thread):
    # The untrained model never answers right, so the pack's reward is constant; a second reward (completion
    # size mod 5) gives the regression targets that vary, so the Reg-GRPO loss has something to fit.
    (tmp_path / "size_reward.py").write_text(
        "def size_mod5(prompts, completions, **columns):\n    return [float(len(str(c)) % 5) for c in completions]\n"
    )
    rewards = [
        {"name": "mmreason.tasks.videoqa.scoring:videoqa_accuracy", "weight": 1.0},
        {"name": str(tmp_path / "size_reward.py") + ":size_mod5", "weight": 0.1},
    ]
    out = tmp_path / "run"
    _train(
        "videoqa_reg_grpo_tiny.yaml",
        tiny_model_dir,
        out,
        f"data.train_path={data}",
        "max_steps=2",
        "eval_steps=2",
        "rewards=" + json.dumps(rewards),
    )
    metrics = _jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]  # step 0: the in-training eval before training
    assert "eval/videoqa/accuracy" in metrics[0]
    metrics = metrics[1:]
    assert all(m["count/bad_samples"] == 0 and m["count/filtered_prompts"] == 0 for m in metrics)
    # at pi_theta = pi_old every predicted advantage is 0, so the loss is the mean squared target: > 0, finite
    assert all(0 < m["policy_loss"] < 10 and m["grad_norm"] > 0 for m in metrics)
    # building the prompts (video decode + processor) is its own part of the step's time split, and the video
    # decode (header reads + frames) a part of it
    for m in metrics:
        parts = sum(m[f"time/{k}"] for k in ("prompts", "generate", "reward", "advantages", "update", "other"))
        assert m["time/prompts"] > 0 and parts == pytest.approx(m["time/step"])
        assert 0 < m["time/video_decode"] <= m["time/prompts"]
    rows = _jsonl(out / "completions.jsonl")
    assert len(rows) == 2 * 4 * 4 and all(r["sample_id"].startswith("videoqa-5-") for r in rows)
    assert {"videoqa_accuracy", "size_mod5"} == set(rows[0]["rewards"])
    # the in-training eval scored the generated held-out split (8 videos x 4 questions) at steps 0 and 2
    assert metrics[-1]["eval/videoqa/n_failed"] == 0 and {"eval/videoqa/accuracy_span", "eval/videoqa/r@0.5"} <= set(
        metrics[-1]
    )
    (held_out,) = shapes_cache.glob("videoqa/*-eval-8-*/data.jsonl")
    assert len(held_out.read_text().splitlines()) == 32
    saved = (out / "config.yaml").read_text()
    assert "policy_loss: reg_grpo" in saved and "num_iterations: 2" in saved
    assert (out / "checkpoint-2" / "model" / "model.safetensors").exists()


@pytest.mark.slow
def test_broken_videos_in_a_run_are_counted_and_logged(tiny_model_dir, tmp_path, data, one_torch_thread):
    rows = _jsonl(data)[:4]
    video = str(data.parent / rows[0]["video"])
    broken = [
        {**rows[0], "id": "cut", "video": str(truncated_video(tmp_path / "cut.mp4"))},
        {**rows[1], "id": "late", "video": video, "window": [30.0, 40.0]},
        {**rows[2], "id": "gone", "video": str(tmp_path / "gone.mp4")},
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*broken, {**rows[3], "video": video}]))
    out = tmp_path / "run"
    _train(
        "videoqa_reg_grpo_tiny.yaml",
        tiny_model_dir,
        out,
        f"data.train_path={path}",
        "max_steps=1",
        "prompts_per_step=4",
        "eval_steps=0",
    )
    (m,) = _jsonl(out / "metrics.jsonl")
    assert m["count/bad_samples"] == 3 and m["completion/length_mean"] > 0  # the good sample still trains
    events = [json.loads(line) for line in (out / "events.log").read_text().splitlines()]
    reasons = {e["sample_id"]: e["reason"] for e in events if e.get("event") == "bad_sample"}
    assert set(reasons) == {"cut", "late", "gone"}
    assert "cut.mp4" in reasons["cut"] and "not a decodable video" in reasons["cut"]
    assert "outside the video" in reasons["late"] and "does not exist" in reasons["gone"]


@pytest.mark.slow
def test_eval_on_a_users_file_reports_types_and_span_metrics(tiny_model_dir, tmp_path, data, one_torch_thread):
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--model",
                str(tiny_model_dir),
                "--tasks",
                f"videoqa:{data}",
                "--output_path",
                str(out),
                "--gen_kwargs",
                "temperature=0,max_new_tokens=8",
                "--device",
                "cpu",
                "--log_samples",
                "--model_args",
                "min_pixels=3136,max_pixels=3136,video_max_frames=8",
                "--limit",
                "8",
            ]
        )
        == 0
    )
    (results_path,) = out.rglob("*_results.json")
    result = json.loads(results_path.read_text())["results"]["videoqa:data"]
    # 8 docs = 2 videos x (mcq, numeric, free, span)
    assert result["accuracy_n,none"] == 8
    for kind in ("mcq", "numeric", "free", "span"):
        assert result[f"accuracy_{kind}_n,none"] == 2
    assert result["miou_n,none"] == 2 and result["r@0.5_n,none"] == 2
    (samples_path,) = out.rglob("*_samples_*.jsonl")
    records = _jsonl(samples_path)
    assert len(records) == 8 and all("response" in r for r in records)
    # each record names the frames the model saw: 2 fps, at most 8, in seconds from the start of the video
    rows = {r["id"]: r for r in _jsonl(data)}
    for r in records:
        (times,) = r["video_frames"]
        duration = rows[r["doc_id"]]["duration"]
        assert len(times) == min(8, 2 * duration) and times == sorted(times) and 0 <= times[0] < times[-1] < duration
        assert r["visual_tokens"] == len(times) // 2 * 4  # 56 x 56 frames: 4 tokens per pair of frames
