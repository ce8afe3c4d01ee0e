"""`mmreason bench episodes`: episodes played together draw what they draw one at a time."""

from __future__ import annotations

import json

import pytest

from mmreason.cli import main


def test_bench_plays_the_same_episodes_both_ways(tiny_model_dir, shapes_cache, capsys):
    assert (
        main(
            [
                "bench",
                "episodes",
                "--model",
                str(tiny_model_dir),
                "--n",
                "2",
                "--group",
                "2",
                "--max-new-tokens",
                "8",
                "--repeats",
                "1",
                "--task-arg",
                "eval_videos=1",
                "--task-arg",
                "seconds=[40,40]",
                "--task-arg",
                "size=32",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["same_tokens"] is True
    assert (result["prompts"], result["episodes"]) == (2, 4)
    assert result["alone_s"] > 0 and result["together_s"] > 0
    # from the unrounded times: the rounded ones give it to within rounding
    assert result["speedup"] == pytest.approx(result["alone_s"] / result["together_s"], rel=0.05)
