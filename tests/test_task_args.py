"""A ``data.task_args`` / ``--task_args`` key the pack's loader does not take (``__init__``, a typo, ``split``) is
one line naming the key and the loader's options, not a ``TypeError`` traceback from inside the call."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.taskpack import TASKS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("options", [{"__init__": 1}, {"nn": 4}, {"split": "eval"}, {1: 2}])
def test_an_option_the_loader_does_not_take_is_named_with_the_loader_s_options(options):
    with pytest.raises(ValueError) as caught:
        TASKS.get("shapes").load_split(None, "train", options)
    message = str(caught.value)
    assert message.startswith("data.task_args: ") and repr(next(iter(options))) in message
    assert message.endswith("it takes: n, seed"), message


def test_train_and_eval_say_it_in_one_line(tiny_model_dir, tmp_path, capsys):
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={tmp_path / 'run'}",
                "data.task_args={__init__: 1}",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "mmreason train: error: data.task_args: '__init__' is not an option of the 'shapes' task's "
        "loader (shapes_load); it takes: n, seed"
    ]
    assert not (tmp_path / "run").exists()  # refused before anything was written
    assert (
        main(
            [
                "eval",
                "--model",
                str(tiny_model_dir),
                "--tasks",
                "shapes",
                "--task_args",
                "__init__=1",
                "--output_path",
                str(tmp_path / "eval"),
            ]
        )
        == 2
    )
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("mmreason eval: error: --task_args: '__init__' is not an option") and "n, seed" in last


def test_every_option_a_loader_declares_is_accepted():
    pack = TASKS.get("shapes")
    assert pack.check_options({"n": 3, "seed": 1}) == {"n": 3, "seed": 1}
    assert len(pack.load_split(None, "train", {"n": 3})) == 3
