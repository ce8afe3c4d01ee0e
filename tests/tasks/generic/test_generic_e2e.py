"""The generic recipes end to end on the tiny model, as a new user runs them: 2 GRPO steps on each of the
EasyR1-, TRL-, verl-, Video-R1- and ShareGPT-style files with nothing but ``data.train_path`` (the EasyR1 one
holding a row whose image file is missing: a counted skip), 2 SFT steps on the multi-turn ShareGPT file, one
streamed run resumed at the next row, and `mmreason eval --tasks generic:PATH` over all five files at once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from generic_helpers import build

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs" / "generic"
FILES = ("easyr1_jsonl", "trl_jsonl", "verl_parquet", "videor1_json", "sharegpt_json")


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _prompts(out: Path) -> list[tuple[int, str]]:
    rows = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    return list(dict.fromkeys((r["step"], r["sample_id"]) for r in rows))


@pytest.mark.slow
def test_grpo_sft_eval_and_a_resumed_stream_on_every_format(tiny_model_dir, tmp_path, one_torch_thread, capsys):
    data = build(tmp_path / "data")
    common = [f"model.name_or_path={tiny_model_dir}", "num_threads=1"]
    # the EasyR1 file with a fifth row whose picture is gone: drawn, counted as a bad sample, the run goes on
    easy = data["easyr1_jsonl"]
    easy.write_text(easy.read_text() + json.dumps({"problem": "?", "answer": "x", "images": ["media/gone.png"]}) + "\n")
    for name in FILES:
        out = tmp_path / f"grpo_{name}"
        extra = ["prompts_per_step=5"] if name == "easyr1_jsonl" else []
        assert (
            main(
                [
                    "train",
                    str(CONFIGS / "grpo_tiny.yaml"),
                    f"data.train_path={data[name]}",
                    f"output_dir={out}",
                    *common,
                    *extra,
                ]
            )
            == 0
        )
        rows = _metrics(out)
        assert [r["step"] for r in rows] == [1, 2], name
        assert all(r["completion/length_mean"] > 0 and "rewards/generic_accuracy/mean" in r for r in rows), name
        if name == "easyr1_jsonl":
            assert rows[0]["count/bad_samples"] == 1 and rows[0]["completion/length_mean"] > 0
    assert "format videor1 (detected)" in capsys.readouterr().out
    out = tmp_path / "sft"
    assert (
        main(
            [
                "sft",
                str(CONFIGS / "sft_tiny.yaml"),
                f"data.train_path={data['sharegpt_json']}",
                f"output_dir={out}",
                *common,
            ]
        )
        == 0
    )
    assert [r["step"] for r in _metrics(out)] == [1, 2] and all(r["tokens"] > 0 for r in _metrics(out))
    # streaming: 2 steps then a resumed third draw the same rows as 3 straight steps
    stream = [
        "data.streaming=true",
        "data.shuffle_buffer=2",
        f"data.train_path={data['shards_dir']}",
        "prompts_per_step=1",
        "rollout.max_completion_length=2",
        *common,
    ]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(["train", str(CONFIGS / "grpo_tiny.yaml"), f"output_dir={straight}", "max_steps=3", *stream]) == 0
    assert (
        main(
            ["train", str(CONFIGS / "grpo_tiny.yaml"), f"output_dir={resumed}", "max_steps=2", "save_steps=1", *stream]
        )
        == 0
    )
    shutil.rmtree(resumed / "checkpoint-2")  # resume from step 1: the stream reopens at row 1
    assert (
        main(["train", str(CONFIGS / "grpo_tiny.yaml"), f"output_dir={resumed}", "max_steps=3", "resume=auto", *stream])
        == 0
    )
    assert _prompts(resumed)[-2:] == _prompts(straight)[-2:]
    capsys.readouterr()
    tasks = ",".join(f"generic:{data[n]}" for n in FILES if n != "easyr1_jsonl")
    assert (
        main(
            [
                "eval",
                "--model",
                str(tiny_model_dir),
                "--tasks",
                tasks,
                "--gen_kwargs",
                "max_new_tokens=4",
                "--output_path",
                str(tmp_path / "eval"),
                "--task_args",
                "group_by=data_source",
            ]
        )
        == 0
    )
    results = json.loads(next((tmp_path / "eval").rglob("*_results.json")).read_text())["results"]
    assert set(results) == {"generic:trl", "generic:verl", "generic:videor1", "generic:sharegpt"}
    assert results["generic:videor1"]["accuracy/data_source=photos_n,none"] == 3
    assert results["generic:verl"]["accuracy/data_source=kitchen_n,none"] == 1
