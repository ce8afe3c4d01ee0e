"""The alarms on real runs: the README's main job raises none; the quickstart with a gameable reward (ANLS at
threshold 0, from the untrained model) raises reward hacking; and the main job's report opens in headless
Chromium with its curves and a rollout with its image."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _alarm_events(run: Path) -> list[dict]:
    log = run / "events.log"
    return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "alarm"] if log.exists() else []


@pytest.fixture(scope="module")
def main_job(tiny_model_dir, shapes_cache, tmp_path_factory):
    """The README's main job, whole: the 30-step SFT warm-up, then 60 GRPO steps (eval every 10)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("main_job")
    assert (
        main(
            [
                "sft",
                str(ROOT / "configs" / "quickstart_sft.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={tmp / 'sft'}",
            ]
        )
        == 0
    )
    out = tmp / "grpo"
    assert (
        main(
            [
                "train",
                QUICKSTART,
                f"model.name_or_path={tmp / 'sft'}/checkpoint-30/model",
                f"output_dir={out}",
                "save_steps=0",
            ]
        )
        == 0
    )
    torch.set_num_threads(before)
    return out


@pytest.mark.slow
def test_main_job_raises_no_alarm(main_job):
    """Held-out accuracy reaches its ceiling while the training reward keeps rising and entropy falls: every
    alarm is checked at every step (``alarm/<name>`` logged) and none holds."""
    rows = [r for r in _rows(main_job) if r["step"] > 0]
    assert len(rows) == 60
    alarms = {k for r in rows for k in r if k.startswith("alarm/")}
    assert {
        "alarm/reward_hacking",
        "alarm/answer_collapse",
        "alarm/entropy_collapse",
        "alarm/no_signal",
        "alarm/truncated",
    } <= alarms
    assert all(r[k] == 0.0 for r in rows for k in alarms)
    assert not _alarm_events(main_job)
    assert rows[-1]["reward/mean"] > rows[0]["reward/mean"] + 0.3  # the reward did rise: a real test
    assert rows[-1]["eval/shapes/accuracy"] >= 0.95


@pytest.mark.slow
def test_gameable_reward_raises_reward_hacking(tiny_model_dir, shapes_cache, tmp_path, one_torch_thread):
    """The quickstart from the untrained model with ANLS at threshold 0: fragments earn partial credit
    without reading the image, so the training reward creeps up while held-out accuracy stays 0. 30 steps
    at learning rate 3e-3 (the alarm's window) with 16 held-out docs every 10 steps."""
    out = tmp_path / "run"
    rewards = json.dumps([{"name": "anls", "kwargs": {"threshold": 0.0}}])
    assert (
        main(
            [
                "train",
                QUICKSTART,
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                f"rewards={rewards}",
                "learning_rate=3e-3",
                "max_steps=30",
                "eval_limit=16",
                "save_steps=0",
                "log_completions_steps=0",
            ]
        )
        == 0
    )
    rows = _rows(out)
    assert {r["eval/shapes/accuracy"] for r in rows if "eval/shapes/accuracy" in r} == {0.0}
    assert rows[-1]["alarm/reward_hacking"] == 1.0
    hacking = [e for e in _alarm_events(out) if e["alarm"] == "reward_hacking"]
    assert hacking and hacking[0]["step"] == 30 and "reward/mean rose" in hacking[0]["reason"]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _headless(html: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--disable-sync",
            f"--user-data-dir={tmp / 'profile'}",
            "--hide-scrollbars",
            *args,
            html.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_of_the_main_job_renders_in_chromium(main_job, tmp_path):
    """`mmreason report` on the main job: the page, opened from disk by headless Chromium with the network
    off, draws the curves, the alarm timeline and the rollouts, and the first rollout's image decodes
    (the page marks each decoded thumbnail with its width); the screenshot is not blank."""
    from PIL import Image

    html = tmp_path / "report.html"
    # the shapes images live in the data cache, outside the run directory: inlined only when allowed
    assert main(["report", str(main_job), "-o", str(html), "--allow-outside-media"]) == 0
    dom = _headless(html, tmp_path, "--dump-dom").stdout
    assert dom.count('class="series"') >= 5  # reward, held-out, entropy, time split ...
    assert 'class="timeline"' in dom and "no alarm was raised" in dom
    assert dom.count('class="completion"') >= 8 and 'class="group rollout"' in dom
    assert 'data-shown="' in dom and 'data-shown="0"' not in dom  # thumbnails decoded
    assert "step-60_samples_shapes.jsonl" in dom  # the in-training eval samples
    shot = tmp_path / "shot.png"
    _headless(html, tmp_path, f"--screenshot={shot}", "--window-size=1200,1400")
    image = Image.open(shot).convert("L")
    histogram = image.histogram()
    assert sum(histogram[:200]) > 0.01 * image.width * image.height  # ink on the page, not a blank white


@pytest.mark.slow
@pytest.mark.parametrize("hacking_alarm", [True, False])
def test_in_training_eval_is_on_by_default_for_the_reward_hacking_alarm(
    tiny_model_dir, shapes_cache, tmp_path, one_torch_thread, hacking_alarm
):
    """With ``eval_steps`` unset, a run at least the alarm's window long evaluates every
    ``health.reward_hacking.eval_steps`` steps on ``eval_limit`` docs (here a window of 2: steps 0 and 2, 4 docs);
    with the alarm off it does not evaluate."""
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                QUICKSTART,
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "eval_steps=null",
                "max_steps=2",
                "prompts_per_step=2",
                "rollout.num_generations=2",
                "save_steps=0",
                "health.reward_hacking.window=2",
                "health.reward_hacking.eval_steps=2",
                "health.reward_hacking.eval_limit=4",
                f"health.reward_hacking.enabled={str(hacking_alarm).lower()}",
                "log_completions_steps=0",
            ]
        )
        == 0
    )
    evals = [r["step"] for r in _rows(out) if "eval/shapes/accuracy" in r]
    assert evals == ([0, 2] if hacking_alarm else [])
    if hacking_alarm:
        assert len((out / "eval" / "step-2_samples_shapes.jsonl").read_text().splitlines()) == 4
