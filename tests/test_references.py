"""References in configs: a task pack named by ``file.py:PACK`` or ``pkg.module:PACK`` resolves to the pack;
a reference naming the wrong kind of object is an error that says what it names."""

from __future__ import annotations

import pytest

from mmreason.rl import ESTIMATORS
from mmreason.taskpack import TASKS, TaskPack

PACK_FILE = """
from mmreason.taskpack import TaskPack

PACK = TaskPack(name="outside", description="a pack defined outside the package", load=lambda path, split: [])
NOT_A_PACK = 3


def load(path, split):
    return []
"""


def test_a_task_pack_named_by_a_file_reference(tmp_path):
    file = tmp_path / "my_pack.py"
    file.write_text(PACK_FILE)
    pack = TASKS.get(f"{file}:PACK")
    assert isinstance(pack, TaskPack) and pack.name == "outside"
    assert TASKS.get("my_pack.py:PACK", base_dir=str(tmp_path)) is pack  # relative to the config's folder
    with pytest.raises(TypeError, match=r"task reference .*:load' names a function, not a TaskPack"):
        TASKS.get(f"{file}:load")
    with pytest.raises(TypeError, match=r"estimator reference .*:NOT_A_PACK' names a int, not a function"):
        ESTIMATORS.get(f"{file}:NOT_A_PACK")
