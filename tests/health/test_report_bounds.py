"""`mmreason report` and the alarm monitor stay bounded on long runs and hostile files (issue 38, point 6):
bounded alarm state equal to the full-history answers, curves downsampled with their extremes kept, alarm marks
merged, steps and text capped, malformed records counted, media only from inside the run directory."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from PIL import Image

from mmreason.bench.report_size import write_run
from mmreason.cli import main
from mmreason.health import alarms
from mmreason.health.config import HealthConfig
from mmreason.health.downsample import Curve
from mmreason.health.monitor import HealthMonitor


def _jsonl(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def _rows(n: int, seed: int) -> list[dict]:
    """Rows that make every alarm flip now and then: an eval-only row, then steps with noisy metrics."""
    rng = random.Random(seed)
    rows = [{"step": 0, "eval/t/acc": 0.1}]
    for s in range(1, n + 1):
        row = {
            "step": s,
            "loss": 0.0,
            "reward/mean": 0.01 * s + rng.gauss(0, 0.05 if s % 100 < 50 else 0.001),
            "rewards/a/mean": rng.random(),
            "entropy": rng.choice([1.0, 0.05]) if s > 40 else 1.0,
            "kl": rng.choice([0.01, 0.02, 0.5, 2.0]),
            "frac_reward_zero_std": rng.choice([0.95, 0.5]),
            "completion/clipped_ratio": rng.choice([0.6, 0.1]),
            "answers/top_share": rng.choice([0.9, 0.2]),
            "answers/gold_top_share": 0.3,
            "answers/golds": 3.0,
            "answers/top": "x",
        }
        if s % 7:  # keys that are missing on some rows
            row["episodes/cut_share"] = rng.choice([0.7, 0.0])
            row["mismatch/logprob_abs_diff_mean"] = rng.choice([0.2, 0.0])
        if s % 10 == 0:
            row["eval/t/acc"] = 0.1 + rng.choice([0.0, 0.0, 0.05])
        rows.append(row)
    return rows


def test_bounded_alarm_history_gives_the_full_history_answers_and_stays_small():
    """At every one of 250 steps each alarm says the same on the monitor's bounded History as on every row so
    far (the quadratic reference); from step 1,000 to 3,000 what the monitor holds does not grow."""
    cfg = HealthConfig()
    rows = _rows(250, seed=1)
    history = alarms.history_for(cfg)
    fired = set()
    for i, row in enumerate(rows):
        history.add(row)
        full = alarms.check_all(rows[: i + 1], cfg)
        assert alarms.check_all(history, cfg) == full, f"step {row['step']}"
        fired |= {name for name, reason in full.items() if reason}
    assert len(fired) >= 6, fired  # the comparison covers alarms that hold, not only quiet ones

    monitor = HealthMonitor(cfg, lambda *a, **k: None, say=lambda _: None)

    def held() -> int:
        h = monitor.history
        return (
            sum(map(len, h.tails.values()))
            + sum(map(len, h.heads.values()))
            + len(h.windows)
            + len(h.evals)
            + len(monitor.first_reasons)
        )

    for row in _rows(1000, seed=2):
        monitor.check(row["step"], {k: v for k, v in row.items() if k != "step"})
    size = held()
    for row in _rows(3000, seed=3)[1001:]:
        monitor.check(row["step"], {k: v for k, v in row.items() if k != "step"})
    assert held() <= size


def test_curve_keeps_the_extremes_of_each_bucket():
    curve = Curve(buckets=10)
    for s in range(10_000):
        curve.add(s, 5000.0 if s == 4321 else -1.0 if s == 8765 else float(s % 3))
    points = curve.points()
    assert len(points) <= 20 and curve.width == 1024
    assert (4321, 5000.0) in points and (8765, -1.0) in points


def test_report_of_a_long_run_is_bounded(tmp_path):
    """5,000 steps, completions every 10 steps: each curve <= 800 points, the 500-step alarm stretch one mark,
    at most 20 of the 500 logged steps shown (first and last among them), the rest listed; a long completion
    cut."""
    run = tmp_path / "run"
    write_run(run, steps=5000, completion_every=10, rows_per_step=2)
    with (run / "completions.jsonl").open("a") as f:
        f.write(json.dumps({"step": 5000, "sample_id": "long", "group": 9, "completion": "y" * 100_000}) + "\n")
    assert main(["report", str(run), "--steps", "2500"]) == 0
    page = (run / "report.html").read_text()
    lines = re.findall(r'<polyline class="series" data-name="([^"]+)"[^>]* points="([^"]*)"', page)
    assert {"reward/mean", "entropy", "eval/shapes/accuracy"} <= {name for name, _ in lines}
    assert all(len(points.split()) <= 800 for _, points in lines)
    assert page.count('class="alarm-mark"') == 1 and "(steps 2500–2999, 500 steps in 1 ranges)" in page
    shown = re.findall(r'<option value="\d+">step (\d+)</option>', page)
    # evenly spread (the stride doubles past the cap: 10 to 19 of them), the last, and the one asked for
    assert 12 <= len(shown) <= 21 and {"10", "2500", "5000"} <= set(shown)
    assert f"{500 - len(shown)} more logged steps not shown" in page and "--steps" in page
    assert "y" * 1000 + "… (99000 more characters)" in page and "y" * 1001 not in page
    assert len(page) < 400_000


def test_malformed_records_are_counted_and_shown_not_fatal(tmp_path):
    run = tmp_path / "run"
    metrics = [
        {"step": 1, "loss": 0.0, "reward/mean": 0.1},
        {"step": 1e308, "loss": 0.0},
        {"step": "2"},
        {"step": -3},
        {"step": True},
        [1, 2],
        "not json {",
        '{"step": 4, "x": "\\ud800"}',
        {"step": 5, "loss": 0.0, "reward/mean": "high", "entropy": [1], "kl": {"a": 1}, "eval/t/a": None},
        {"step": 6, "loss": 0.0, "reward/mean": 0.2, "answers/top": ["a"], "alarm/x": "on"},
    ]
    _jsonl(run / "metrics.jsonl", metrics)
    good = {"step": 1, "sample_id": "s", "group": 0, "completion": "ok", "reward": 1.0, "rewards": {"a": 1.0}}
    completions = [
        good,
        {**good, "turns": "a string"},
        {**good, "turns": [{"role": 3, "text": "t"}]},
        {**good, "turns": ["x"]},
        {**good, "step": 1e308},
        {**good, "rewards": [1]},
        {**good, "media": "a.png"},
        {**good, "media": [5]},
        {**good, "group": [1]},
        '{"step": 1, "completion": "\\udc00"}',
        {**good, "reward": "x", "advantage": [1]},
        {**good, "turns": [{"role": "assistant", "text": 5}]},
        7,
    ]
    _jsonl(run / "completions.jsonl", completions)
    samples = [{"doc_id": 1, "prompt": 5, "scores": "high"}, {"doc_id": [1]}, {"doc_id": "d", "scores": {"a": 1}}]
    _jsonl(run / "eval" / "step-10_samples_t.jsonl", samples)
    _jsonl(run / "events.log", [{"event": "alarm", "alarm": ["x"], "reason": 5}, "[]"])
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    table = page.split('class="malformed">')[1].split("</table>")[0]
    expected = {
        ("metrics.jsonl", "step is not an integer in [0, 2**53]", 4),
        ("metrics.jsonl", "a JSON list, not an object", 1),
        ("metrics.jsonl", "not JSON", 1),
        ("metrics.jsonl", "a lone surrogate (text that is not Unicode)", 1),
        ("completions.jsonl", "turns is not a list of {role: text, text: ...} objects", 3),
        ("completions.jsonl", "step is not an integer in [0, 2**53]", 1),
        ("completions.jsonl", "rewards is a list, not an object", 1),
        ("completions.jsonl", "media is not a list of paths", 2),
        ("completions.jsonl", "group is a list", 1),
        ("completions.jsonl", "a lone surrogate (text that is not Unicode)", 1),
        ("completions.jsonl", "a JSON int, not an object", 1),
        ("step-10_samples_t.jsonl", "scores is a str, not an object", 1),
        ("step-10_samples_t.jsonl", "doc_id is a list", 1),
        ("events.log", "a JSON list, not an object", 1),
    }
    found = {
        (f, html_unescape(w), int(c))
        for f, w, c in re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td><td>(\d+)</td><td>\d+</td></tr>", table)
    }
    assert found == expected
    assert "Malformed records left out (20)" in page
    assert page.count('class="completion"') == 3  # the good row and the two whose odd values are shown as text


def html_unescape(text: str) -> str:
    import html

    return html.unescape(text)


def test_media_only_from_inside_the_run_directory(tmp_path):
    outside = tmp_path / "secret.png"
    Image.new("RGB", (40, 40), "red").save(outside)
    run = tmp_path / "run"
    (run / "media").mkdir(parents=True)
    Image.new("RGB", (40, 40), "blue").save(run / "media" / "ok.png")
    (run / "media" / "link.png").symlink_to(outside)
    _jsonl(run / "metrics.jsonl", [{"step": 1, "loss": 0.0, "reward/mean": 0.1}])
    media = [
        str(outside),
        "../secret.png",
        "media/../../secret.png",
        "media/link.png",
        "media/ok.png",
        str(run / "media" / "ok.png"),
    ]
    _jsonl(
        run / "completions.jsonl",
        [{"step": 1, "sample_id": f"s{i}", "group": i, "completion": "c", "media": [m]} for i, m in enumerate(media)],
    )

    def thumbs(*flags: str) -> tuple[str, dict]:
        assert main(["report", str(run), *flags]) == 0
        page = (run / "report.html").read_text()
        return page, json.loads(re.search(r'id="thumbs">(.*?)</script>', page).group(1))

    page, uris = thumbs()
    assert len(uris) == 2 and len(set(uris.values())) == 1  # media/ok.png by its two names; nothing outside
    assert page.count("is outside the report&#x27;s directory (--allow-outside-media inlines it)") == 4
    page, uris = thumbs("--allow-outside-media")
    assert len(uris) == 6 and len(set(uris.values())) == 2  # the red secret by its four names too


def test_media_from_the_data_cache_are_inlined(tmp_path, monkeypatch):
    """The packs' generated data live in the data cache ($MMREASON_CACHE), outside any run directory: the main
    job's report shows its images without --allow-outside-media; a file beside the cache is still refused."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MMREASON_CACHE", str(cache))
    (cache / "shapes").mkdir(parents=True)
    Image.new("RGB", (40, 40), "green").save(cache / "shapes" / "0.png")
    Image.new("RGB", (40, 40), "red").save(tmp_path / "secret.png")
    run = tmp_path / "run"
    _jsonl(run / "metrics.jsonl", [{"step": 1, "loss": 0.0, "reward/mean": 0.1}])
    media = [str(cache / "shapes" / "0.png"), str(cache / ".." / "secret.png")]
    _jsonl(
        run / "completions.jsonl",
        [{"step": 1, "sample_id": f"s{i}", "group": i, "completion": "c", "media": [m]} for i, m in enumerate(media)],
    )
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    uris = json.loads(re.search(r'id="thumbs">(.*?)</script>', page).group(1))
    assert len(uris) == 1
    assert page.count("is outside the report&#x27;s directory (--allow-outside-media inlines it)") == 1
