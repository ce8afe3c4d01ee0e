"""`mmreason eval` end to end on the tiny model and the shapes pack: files, numbers, resume, faults."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

import pytest

from mmreason.eval.output import RunFiles
from mmreason.taskpack import TASKS

FAST = ("--gen_kwargs", "max_new_tokens=8", "--seed", "3")


def _samples(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_shapes_end_to_end(run_eval, tiny_model_dir, shapes_cache, tmp_path):
    out = run_eval(
        "--model",
        str(tiny_model_dir),
        "--tasks",
        "shapes",
        "--batch_size",
        "4",
        "--limit",
        "10",
        "--output_path",
        str(tmp_path),
        "--log_samples",
        *FAST,
    )
    model_dir = tmp_path / re.sub(r"[/:]+", "__", str(tiny_model_dir))
    assert out.results_path.parent == model_dir
    assert re.fullmatch(r"\d{8}_\d{6}_results\.json", out.results_path.name)
    stamp = out.results_path.name.removesuffix("_results.json")
    samples_file = model_dir / f"{stamp}_samples_shapes.jsonl"
    assert out.samples_paths == {"shapes": samples_file}
    assert not list(model_dir.glob("*_pending.json"))  # finished

    results = json.loads(out.results_path.read_text())
    assert results == out.results
    rows = _samples(samples_file)
    pack = TASKS.get("shapes")
    docs = pack.load(None, "eval")[:10]
    assert [r["doc_id"] for r in rows] == [d.id for d in docs]  # doc order, whatever the batch order was
    for row, doc in zip(rows, docs):
        assert row["target"] == doc.answer and "What colour is the shape?" in row["prompt"]
        assert row["scores"]["accuracy"] == pack.metrics["accuracy"](doc, row["response"])
        assert row["completion_tokens"] <= 8 and row["prompt_tokens"] > row["visual_tokens"] > 0
        assert isinstance(row["parsed_answer"], str)
    scores = [r["scores"]["accuracy"] for r in rows]
    res = results["results"]["shapes"]
    assert res["accuracy,none"] == statistics.fmean(scores)
    assert res["accuracy_n,none"] == res["n"] == 10 and res["n_failed"] == 0
    expected_se = statistics.stdev(scores) / math.sqrt(10)
    assert res["accuracy_stderr,none"] == pytest.approx(expected_se, abs=1e-12)
    # Everything that moves a score is recorded.
    cfg, task_cfg = results["config"], results["configs"]["shapes"]
    assert task_cfg["prompt_template"] == pack.prompt_template
    assert task_cfg["metrics"]["accuracy"]["function"].endswith("shapes_metric_accuracy")
    assert "final_answer" in task_cfg["answer_extractor"]
    assert cfg["gen_kwargs"]["max_new_tokens"] == 8 and cfg["seed"] == 3 and cfg["batch_size"] == 4
    assert cfg["image_pixels"]["max"] > 0 and cfg["video_frames"] == {"fps": 2.0, "max_frames": 16}
    assert results["versions"]["torch"] and results["versions"]["transformers"]
    assert results["n-samples"]["shapes"] == {"original": 64, "effective": 10}
    table = (model_dir / f"{stamp}_results.md").read_text()
    assert f"| shapes | accuracy | ↑ | {res['accuracy,none']:.4f} | ± |" in table


def test_resume_gives_the_results_of_an_uninterrupted_run(
    run_eval, tiny_model_dir, shapes_cache, tmp_path, monkeypatch
):
    args = [
        "--model",
        str(tiny_model_dir),
        "--tasks",
        "shapes",
        "--batch_size",
        "3",
        "--limit",
        "11",
        "--log_samples",
        "--gen_kwargs",
        "max_new_tokens=6,temperature=0.9",
        "--seed",
        "5",
    ]
    whole = run_eval(*args, "--output_path", str(tmp_path / "whole"))

    # Interrupted after two batches, the second cut off in the middle of its last line.
    real_append, calls = RunFiles.append, []

    def dying_append(self, name, records):
        calls.append(len(records))
        if len(calls) == 2:
            real_append(self, name, records[:-1])
            with self.samples_path(name).open("a") as f:
                f.write(json.dumps(records[-1])[:25])
            raise KeyboardInterrupt
        real_append(self, name, records)

    monkeypatch.setattr(RunFiles, "append", dying_append)
    with pytest.raises(KeyboardInterrupt):
        run_eval(*args, "--output_path", str(tmp_path / "cut"))
    monkeypatch.setattr(RunFiles, "append", real_append)
    pending = list((tmp_path / "cut").rglob("*_pending.json"))
    assert len(pending) == 1

    resumed = run_eval(*args, "--output_path", str(tmp_path / "cut"))
    assert resumed.resumed_docs == 3 + 2  # the first batch and the complete lines of the second
    assert resumed.results_path.name == pending[0].name.replace("_pending", "_results")
    assert not pending[0].exists()

    def comparable(results):
        return {k: v for k, v in results.items() if k not in ("date", "total_evaluation_time_seconds", "resources")}

    assert comparable(json.loads(resumed.results_path.read_text())) == comparable(whole.results)
    assert resumed.samples_paths["shapes"].read_text() == whole.samples_paths["shapes"].read_text()

    # A finished run is not reopened: the same command evaluates afresh under a new timestamp.
    again = run_eval(*args, "--output_path", str(tmp_path / "cut"))
    assert again.resumed_docs == 0 and again.results_path != resumed.results_path


def test_batch_size_does_not_change_any_record(run_eval, tiny_model_dir, shapes_cache, tmp_path):
    common = ["--model", str(tiny_model_dir), "--tasks", "shapes", "--limit", "7", "--log_samples", *FAST]
    one = run_eval(*common, "--batch_size", "1", "--output_path", str(tmp_path / "b1"))
    five = run_eval(*common, "--batch_size", "5", "--output_path", str(tmp_path / "b5"))
    assert one.samples_paths["shapes"].read_text() == five.samples_paths["shapes"].read_text()


def test_broken_media_is_reported_and_the_run_goes_on(run_eval, tiny_model_dir, shapes_cache, tmp_path):
    source = TASKS.get("shapes").load(None, "eval")[:5]
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    rows = [{"id": s.id, "image": s.images[0], "question": s.prompt_text, "answer": s.answer} for s in source]
    rows[1]["image"] = str(tmp_path / "missing.png")
    rows[3]["image"] = str(corrupt)
    data = tmp_path / "mydata.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))

    out = run_eval(
        "--model",
        str(tiny_model_dir),
        "--tasks",
        f"shapes:{data}",
        "--batch_size",
        "2",
        "--output_path",
        str(tmp_path / "out"),
        "--log_samples",
        *FAST,
    )
    res = out.results["results"]["shapes:mydata"]
    assert (res["n"], res["n_failed"], res["failed_ids"]) == (3, 2, [source[1].id, source[3].id])
    assert out.results["configs"]["shapes:mydata"]["data"] == str(data)
    records = {r["doc_id"]: r for r in _samples(out.samples_paths["shapes:mydata"])}
    assert "missing.png" in records[source[1].id]["error"] and "MediaError" in records[source[1].id]["error"]
    assert "corrupt.png" in records[source[3].id]["error"]
    assert "scores" in records[source[0].id]
    assert source[1].id in out.results_path.with_name(out.results_path.name.replace(".json", ".md")).read_text()

    # A prompt over max_prompt_length fails its doc the same way (it is never cut).
    short = run_eval(
        "--model",
        str(tiny_model_dir),
        "--tasks",
        "shapes",
        "--limit",
        "2",
        "--output_path",
        str(tmp_path / "short"),
        "--model_args",
        "max_prompt_length=20",
        *FAST,
    )
    res = short.results["results"]["shapes"]
    assert (res["n"], res["n_failed"], res["accuracy,none"]) == (0, 2, None)
    assert res["failed_ids"] == [d.id for d in source[:2]]
    assert short.samples_paths == {} and not list(short.results_path.parent.glob("*_samples_*"))  # no --log_samples


def test_a_model_directory_that_does_not_load_is_named(run_eval, shapes_cache, tmp_path):
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    with pytest.raises(ValueError, match="broken-model"):
        run_eval("--model", str(broken), "--tasks", "shapes", "--output_path", str(tmp_path / "o"))
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        run_eval("--model", str(tmp_path / "no-such-model"), "--tasks", "shapes")
