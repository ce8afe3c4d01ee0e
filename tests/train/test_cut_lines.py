"""A crash mid-write never makes a good checkpoint unresumable: every JSON Lines file a run reads back drops a
line cut short at its end with one warning naming the file, and skips (and counts) a broken line elsewhere;
a resumed run cuts the broken tail off before appending, so its rows never glue onto it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mmreason.cli import main
from mmreason.eval.paired import read_scores
from mmreason.paths import read_jsonl, seal_jsonl

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_cut_last_line_is_dropped_with_one_warning_and_a_broken_middle_line_counted(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "text": "é\u2028x"}, {"step": 2}, {"step": 3}]
    whole = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    cut = json.dumps({"step": 4, "text": "ééé"}, ensure_ascii=False).encode()[:22]  # inside a UTF-8 character
    path.write_bytes(whole.encode() + cut)
    with caplog.at_level(logging.WARNING, logger="mmreason.paths"):
        got = read_jsonl(path)
    assert list(got) == rows and got.cut_last and got.skipped == 0
    (warning,) = _warnings(caplog)
    assert str(path) in warning and "last line (4)" in warning
    caplog.clear()
    lines = [line + "\n" for line in whole.split("\n") if line]  # not splitlines: row 1 holds a U+2028
    path.write_text(lines[0] + '{"step": 1.5, "lo\n' + "7\n" + lines[1] + lines[2], encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="mmreason.paths"):
        got = read_jsonl(path)
    assert list(got) == rows and got.skipped == 2 and not got.cut_last
    (warning,) = _warnings(caplog)
    assert str(path) in warning and "2 lines" in warning and "2, 3" in warning


def test_seal_cuts_a_broken_tail_and_ends_a_whole_record(tmp_path):
    path = tmp_path / "events.log"
    path.write_text('{"a": 1}\n{"b": 2')
    seal_jsonl(path)
    assert path.read_text() == '{"a": 1}\n'
    path.write_text('{"a": 1}\n{"b": 2}')
    seal_jsonl(path)
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'


def test_paired_scores_read_a_journal_cut_short(tmp_path):
    samples = tmp_path / "x_samples_shapes.jsonl"
    samples.write_text(json.dumps({"doc_id": "a", "scores": {"accuracy": 1.0}}) + "\n" + '{"doc_id": "b", "sco')
    assert read_scores(samples) == {"a": {"accuracy": 1.0}}


def test_resume_auto_past_a_cut_metrics_line(tiny_model_dir, shapes_cache, tmp_path, caplog, capsys):
    out = tmp_path / "run"
    args = [
        "train",
        QUICKSTART,
        f"model.name_or_path={tiny_model_dir}",
        f"output_dir={out}",
        "save_steps=1",
        "prompts_per_step=2",
        "rollout.num_generations=2",
        "rollout.max_completion_length=3",
        "num_threads=1",
        "eval_steps=0",
        "log_completions_steps=1",
    ]
    assert main([*args, "max_steps=2"]) == 0
    for name in ("metrics.jsonl", "completions.jsonl"):  # killed while writing step 3's rows
        with (out / name).open("a") as f:
            f.write('{"step": 3, "loss": 0.1')
    with caplog.at_level(logging.WARNING, logger="mmreason.paths"):
        assert main([*args, "max_steps=3", "resume=auto"]) == 0
    assert "resumed from" in capsys.readouterr().out
    assert any("metrics.jsonl" in w and "cut short" in w for w in _warnings(caplog))
    for name in ("metrics.jsonl", "completions.jsonl"):  # every line whole again, step 3 written once
        lines = (out / name).read_text().splitlines()
        assert sorted({json.loads(x)["step"] for x in lines}) == [1, 2, 3], name
    assert [json.loads(x)["step"] for x in (out / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
