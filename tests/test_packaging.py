"""A plain (non-editable) build ships tasks/ and rewards/ inside the package as mmreason.tasks / .rewards."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_maps_tasks_and_rewards_into_the_package(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next(tmp_path.glob("mmreason-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    expected_packs = {p.parent.name for p in (ROOT / "tasks").glob("*/__init__.py")}
    assert expected_packs, "no task packs in tasks/"
    for pack in expected_packs:
        assert f"mmreason/tasks/{pack}/__init__.py" in names
    # Every source file ships, under its package name (a folder without __init__.py would be left out).
    for folder, package in (("mmreason", "mmreason"), ("tasks", "mmreason/tasks"), ("rewards", "mmreason/rewards")):
        for module in (ROOT / folder).rglob("*.py"):
            assert f"{package}/{module.relative_to(ROOT / folder).as_posix()}" in names, module
    assert "mmreason/models/chat_template.jinja" in names
    assert not any(n.startswith(("tasks/", "rewards/")) for n in names)  # no stray top-level packages
