"""`mmreason report` on small hand-made directories: an eval samples file, two runs compared, a run logged
without alarm metrics (replayed), bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

from PIL import Image

from mmreason.cli import main


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_eval_samples_file_shows_question_media_answer_gold_score(tmp_path):
    image = tmp_path / "eval" / "img.png"  # inside the reported directory (outside: --allow-outside-media)
    image.parent.mkdir()
    Image.new("RGB", (400, 300), "green").save(image)
    prompt = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What colour?<|im_end|>\n"
    records = [
        {
            "doc_id": f"d{i}",
            "prompt": prompt,
            "response": "green" if i % 2 else "red",
            "parsed_answer": "green" if i % 2 else "red",
            "target": "green",
            "scores": {"accuracy": float(i % 2)},
            "media": [str(image)],
        }
        for i in range(7)
    ]
    out = tmp_path / "eval" / "model"
    _jsonl(out / "20260101_samples_shapes.jsonl", records)
    assert main(["report", str(tmp_path / "eval"), "--max-rows", "3", "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert page.count('class="sample"') == 7 and "What colour?" in page and "<|vision_start|>" not in page
    assert page.count('class="page"') == 3  # 7 docs, 3 a page
    assert "accuracy 0.429" in page  # 3 of 7 right
    uris = json.loads(re.search(r'id="thumbs">(.*?)</script>', page).group(1))
    assert len(uris) == 1  # the one image, inlined once, downscaled
    assert all(u.startswith("data:image/png;base64,") for u in uris.values())
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page


def _run(path: Path, reward: float, alarms: bool) -> None:
    rows = [{"step": 0, "eval/t/accuracy": 0.0}]
    for s in range(1, 41):
        row = {
            "step": s,
            "loss": 0.0,
            "reward/mean": reward + 0.003 * s + 0.001 * (s % 3),
            "entropy": 1.0,
            "time/step": 0.5,
            "completion/clipped_ratio": 0.0,
        }
        if s % 10 == 0:
            row["eval/t/accuracy"] = 0.0
        if alarms:
            row["alarm/reward_hacking"] = float(s >= 30)
        rows.append(row)
    _jsonl(path / "metrics.jsonl", rows)


def test_compare_two_runs_and_replay_alarms_of_a_run_logged_without_them(tmp_path):
    _run(tmp_path / "a", 0.1, alarms=True)
    _run(tmp_path / "b", 0.2, alarms=False)
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    page = (tmp_path / "a" / "compare.html").read_text()
    assert 'data-name="A: reward/mean"' in page and 'data-name="B: reward/mean"' in page
    assert 'data-name="A: eval/t/accuracy"' in page
    # b logged no alarm metrics: replayed with the default thresholds, the same 11 steps (30..40) hold; each
    # run's marks are merged into one range
    assert page.count('class="alarm-mark"') == 2 and page.count("(steps 30–40, 11 steps in 1 ranges)") == 2
    assert "no completions.jsonl" in page


def test_report_names_a_directory_that_is_neither(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "neither a run directory" in capsys.readouterr().err


def test_rollout_browser_shows_groups_turns_and_caps_rows(tmp_path):
    """Two logged steps; step 10 holds an episode's turns; with max_rows 3 step 20 shows 3 of its 4 rows."""
    run = tmp_path / "run"
    _jsonl(run / "metrics.jsonl", [{"step": s, "loss": 0.0, "reward/mean": 0.5} for s in range(1, 21)])
    turns = [
        {"role": "assistant", "text": '<tool_call>{"name": "get_frame", "arguments": {"t": 3}}</tool_call>'},
        {"role": "observation", "text": "frame at 3.0 s"},
        {"role": "assistant", "text": "<answer>B</answer>"},
    ]
    rows = [
        {
            "step": 10,
            "sample_id": "ep-0",
            "group": 0,
            "prompt": "Which phase?",
            "answer": "B",
            "reward": 1.0,
            "advantage": 0.7,
            "rewards": {"answer": 1.0, "tool": 0.5},
            "media": ["missing.mp4"],
            "turns": turns,
        }
    ]
    rows += [
        {
            "step": 20,
            "sample_id": f"s-{i // 2}",
            "group": i // 2,
            "prompt": "q",
            "answer": "a",
            "completion": f"c{i}",
            "reward": 0.0,
            "advantage": -0.1,
            "rewards": {"answer": 0.0},
            "media": [],
        }
        for i in range(4)
    ]
    _jsonl(run / "completions.jsonl", rows)
    assert main(["report", str(run), "--max-rows", "3"]) == 0
    page = (run / "report.html").read_text()
    assert '<option value="0">step 10</option>' in page and '<option value="1">step 20</option>' in page
    assert "<b>observation:</b> frame at 3.0 s" in page and "get_frame" in page
    assert page.count('class="completion"') == 4 and "1 more rows at this step not shown" in page
    assert "missing.mp4: FileNotFoundError" in page  # a medium that cannot be read is named, not dropped


def test_thumbnails_of_a_pdf_page_and_video_frames(tmp_path):
    """A page of a PDF gives one thumbnail, a video four frames; each at most 128 px on its longest side."""
    import base64
    import io

    import numpy as np

    from mmreason.health.thumbs import Thumbs
    from mmreason.media.video_write import write_mp4

    Image.new("RGB", (600, 800), "red").save(tmp_path / "doc.pdf", "PDF", resolution=72)
    write_mp4(tmp_path / "v.mp4", [np.full((64, 96, 3), 20 * i, dtype=np.uint8) for i in range(12)], fps=4)
    thumbs = Thumbs([tmp_path])
    page, frames = thumbs.ref("doc.pdf#page=0"), thumbs.ref("v.mp4")
    assert len(page) == 1 and len(frames) == 4 and not thumbs.missing
    for ref in page + frames:
        image = Image.open(io.BytesIO(base64.b64decode(thumbs.uris[ref].split(",", 1)[1])))
        assert max(image.size) <= 128
