"""`mmreason plot RUN_A RUN_B`: the runs' curves share each panel, one line per run."""

from __future__ import annotations

import json

import pytest

from mmreason.cli import main
from mmreason.train.plot import comparison_series


def _run(folder, rewards):
    folder.mkdir(parents=True)
    rows = [
        {
            "step": s + 1,
            "reward/mean": r,
            "loss": 0.1 * s,
            "rewards/videoqa_accuracy/mean": r,
            "rewards/videoqa_accuracy/std": 0.0,
        }
        for s, r in enumerate(rewards)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_two_runs_share_each_panel(tmp_path, capsys):
    a = _run(tmp_path / "reg_grpo", [0.1, 0.3, 0.5])
    b = _run(tmp_path / "grpo", [0.2, 0.2])
    series = comparison_series([a, b])
    assert list(series) == ["reward/mean", "loss", "rewards/videoqa_accuracy/mean"]  # std columns left out
    assert series["reward/mean"] == {"reg_grpo": [(1, 0.1), (2, 0.3), (3, 0.5)], "grpo": [(1, 0.2), (2, 0.2)]}
    assert main(["plot", str(a), str(b)]) == 0
    assert (a / "compare.png").stat().st_size > 1000 and "compare.png" in capsys.readouterr().out
    out = tmp_path / "both.png"
    assert main(["plot", str(a), str(b), "--keys", "loss", "--out", str(out)]) == 0 and out.exists()


def test_runs_with_the_same_folder_name_are_told_apart(tmp_path):
    a = _run(tmp_path / "x" / "run", [1.0])
    b = _run(tmp_path / "y" / "run", [0.0])
    assert set(comparison_series([a, b], ("reward/mean",))["reward/mean"]) == {"x/run", "y/run"}


def test_one_run_still_writes_its_curves(tmp_path):
    a = _run(tmp_path / "solo", [0.1, 0.2])
    assert main(["plot", str(a)]) == 0 and (a / "curves.png").exists()
    with pytest.raises(FileNotFoundError, match="run directory"):
        comparison_series([a, tmp_path / "missing"])
