"""`mmreason bench eval-overhead`: both sides generate the same text on the same batches."""

from __future__ import annotations

import argparse
import json

from mmreason.bench import eval_overhead


def test_bench_compares_like_with_like(tiny_model_dir, shapes_cache, capsys):
    parser = argparse.ArgumentParser()
    eval_overhead.add_arguments(parser)
    args = parser.parse_args(
        [
            "--model",
            str(tiny_model_dir),
            "--n",
            "6",
            "--batch_size",
            "3",
            "--max_new_tokens",
            "5",
            "--repeats",
            "1",
            "--dtype",
            "float32",
        ]
    )
    assert eval_overhead.run(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["same_outputs"] is True  # the harness and the bare loop decoded the same completions
    assert result["harness_s"] > 0 and result["bare_s"] > 0
    expected = round(100 * (result["harness_s"] - result["bare_s"]) / result["bare_s"], 2)
    assert abs(result["overhead_pct"] - expected) < 0.5  # from the rounded times
    assert (result["n"], result["batch_size"], result["device"]) == (6, 3, "cpu")
