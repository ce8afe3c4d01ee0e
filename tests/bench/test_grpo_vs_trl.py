"""`mmreason bench grpo-vs-trl` wiring: the CLI reaches the bench, both trainers run on the same prompts, the
table has both sides and the ratio. Timings are figures, never asserted; the smallest sizes keep it short."""

import json

import pytest

pytest.importorskip("trl")


def test_bench_runs_both_trainers_on_the_same_prompts(tiny_model_dir, tmp_path, one_torch_thread, capsys):
    from mmreason.cli import main

    out = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "grpo-vs-trl",
                "--model",
                str(tiny_model_dir),
                "--pages",
                "2",
                "--page-px",
                "56",
                "--num-generations",
                "2",
                "--completion-len",
                "3",
                "--steps",
                "1",
                "--warmup",
                "1",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "mmreason" in printed and "trl" in printed and "ratio" in printed
    r = json.loads(out.read_text())
    assert r["mmreason"]["prompt_tokens"] == r["trl"]["prompt_tokens"] > 2 * 4  # two 4-token images + text
    assert r["ratio"] == pytest.approx(r["mmreason"]["step"] / r["trl"]["step"])
    for side in ("mmreason", "trl"):
        assert 0 < r[side]["completion_tokens"] <= 3
        assert len(r[side]["steps"]) == 1
