"""`mmreason eval` on the tiny model over MathVista and Video-MME files in their published layout; re-scoring the
run's own samples file gives back its numbers doc by doc."""

from __future__ import annotations

import argparse
import json

import pytest
from published_files import mathvista_repo, videomme_set

from mmreason.eval.paired import paired
from mmreason.eval.rescore import rescore

FAST = ("--gen_kwargs", "max_new_tokens=6", "--seed", "1", "--log_samples")
pytestmark = pytest.mark.slow


def _eval(*argv: str):
    from mmreason.eval.cli import add_arguments, build_config
    from mmreason.eval.harness import evaluate

    parser = argparse.ArgumentParser(prog="mmreason eval")
    add_arguments(parser)
    return evaluate(build_config(parser.parse_args(list(argv))), progress=False)


def test_mathvista_model_run_then_rescored(tiny_model_dir, tmp_path, one_torch_thread):
    data = mathvista_repo(tmp_path / "MathVista")
    (data.parent / "images" / "4.png").unlink()  # a missing image: a failed doc, named, not a 0
    out = _eval(
        "--model",
        str(tiny_model_dir),
        "--tasks",
        f"mathvista:{data}",
        "--batch_size",
        "2",
        "--output_path",
        str(tmp_path / "run"),
        *FAST,
    )
    task = out.results["results"]["mathvista:testmini"]
    assert (task["n"], task["n_failed"], task["failed_ids"]) == (4, 1, ["4"])
    records = [json.loads(line) for line in out.samples_paths["mathvista:testmini"].read_text().splitlines()]
    assert [r["doc_id"] for r in records] == ["1", "2", "3", "4", "5"]
    assert "4.png" in records[3]["error"]
    assert "accuracy_skills_arithmetic_reasoning" in records[0]["scores"]

    # The run's samples file is a predictions file: re-scored, every doc keeps its scores.
    again, path = rescore(
        f"mathvista:{data}", str(out.samples_paths["mathvista:testmini"]), output_path=str(tmp_path / "rescored")
    )
    redo = again["results"]["mathvista:testmini"]
    for key, value in task.items():
        if key.endswith(",none") and "stderr" not in key:
            assert redo[key] == value, key
    result = paired(out.samples_paths["mathvista:testmini"], path.parent, "accuracy")
    assert (result["n"], result["up"], result["down"]) == (4, 0, 0)


def test_videomme_with_subtitles_on_two_clips(tiny_model_dir, tmp_path, one_torch_thread):
    annotation = videomme_set(tmp_path / "Video-MME")
    clip = tmp_path / "Video-MME" / "data" / "vidB.mp4"
    clip.rename(clip.with_suffix(".gone"))  # a missing video: its question fails, named, the run goes on
    out = _eval(
        "--model",
        str(tiny_model_dir),
        "--tasks",
        f"videomme:{annotation}",
        "--task_args",
        "subtitles=true",
        "--model_args",
        "video_fps=2,video_max_frames=2",
        "--batch_size",
        "3",
        "--output_path",
        str(tmp_path / "run"),
        *FAST,
    )
    name = next(iter(out.results["results"]))
    task = out.results["results"][name]
    assert (task["n"], task["n_failed"], task["failed_ids"]) == (2, 1, ["002-1"])
    assert task["accuracy_duration_short_n,none"] == 2 and task["accuracy_duration_long_n,none"] == 0
    records = [json.loads(line) for line in out.samples_paths[name].read_text().splitlines()]
    assert [r["doc_id"] for r in records] == ["001-1", "001-2", "002-1"]
    assert "the red ball rolls" in records[0]["prompt"] and "vidB.mp4" in records[2]["error"]
    assert "1 of 2 videos have a .srt" in out.results["configs"][name]["note"]


def test_mathvista_judge_extraction_runs_a_local_model(tiny_model_dir, tmp_path, one_torch_thread):
    from mmreason.tasks.mathvista import judge

    data = mathvista_repo(tmp_path / "MathVista")
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"1": "It is 1.2 cm.", "3": "The red one is the circle."}))
    results, _ = rescore(
        f"mathvista:{data}",
        str(preds),
        output_path=str(tmp_path / "out"),
        task_args={"extractor": "judge", "judge": str(tiny_model_dir)},
    )
    task = results["results"]["mathvista:testmini"]
    assert task["accuracy_n,none"] == 2 and task["n_metric_failed"] == 0  # both scored on the judge's text
    assert "judge model" in results["configs"]["mathvista:testmini"]["note"]
    written = {key[0]: text for key, text in judge._CACHE.items() if key[0] in ("1", "3")}
    assert set(written) == {"1", "3"} and all(isinstance(t, str) and "\n" not in t for t in written.values())
    with pytest.raises(ValueError, match="extractor=judge needs judge=PATH"):
        rescore(f"mathvista:{data}", str(preds), output_path=str(tmp_path / "o2"), task_args={"extractor": "judge"})
