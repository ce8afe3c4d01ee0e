"""Every task pack has one shape (docs/extending.md, "A task pack"): the files named by their role, one registration
per folder, the pack named as its folder, its default rewards in ``rewards.py``, the metrics it defines in
``scoring.py``, its baseline rule in ``baseline.py``, and a one-screen README whose commands parse and whose links
resolve. The last test builds a folder that breaks the shape and checks that each break is named."""

from __future__ import annotations

import ast
import importlib
import re
import shlex
from pathlib import Path

import pytest

from mmreason.cli import build_parser
from mmreason.taskpack import TASKS

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("__init__.py", "data.py", "rewards.py", "scoring.py", "README.md")
RENAMED = {
    "learncheck.py": "baseline.py",
    "synthetic.py": "synth.py",
    "score.py": "scoring.py",
    "metrics.py": "scoring.py",
}
README_LINES = 40  # one screen
PACKS = sorted(p.parent for p in (ROOT / "tasks").glob("*/__init__.py"))


def _registrations(path: Path) -> int:
    """Calls of ``register_task`` in one module."""
    calls = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)]
    return sum(
        (isinstance(c.func, ast.Name) and c.func.id == "register_task")
        or (isinstance(c.func, ast.Attribute) and c.func.attr == "register_task")
        for c in calls
    )


def shape_problems(folder: Path) -> list[str]:
    """What the pack folder lacks or has in place of the shape's files; [] when it has the shape."""
    name = folder.name
    problems = [f"{name}: no {f}" for f in REQUIRED if not (folder / f).is_file()]
    problems += [f"{name}: {old} is named {new} in a pack" for old, new in RENAMED.items() if (folder / old).exists()]
    calls = {p.relative_to(folder).as_posix(): n for p in sorted(folder.rglob("*.py")) if (n := _registrations(p))}
    if calls != {"__init__.py": 1}:
        problems.append(f"{name}: one register_task call, in __init__.py, registers the pack; found {calls}")
    readme = folder / "README.md"
    if readme.is_file():
        lines = readme.read_text().splitlines()
        if len(lines) > README_LINES:
            problems.append(f"{name}: README.md has {len(lines)} lines (one screen: {README_LINES})")
        if f"docs/tasks/{name}.md" not in "\n".join(lines):
            problems.append(f"{name}: README.md does not link docs/tasks/{name}.md")
    return problems


def _readme_commands(text: str) -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    lines = [line.strip() for block in blocks for line in block.replace("\\\n", " ").splitlines()]
    return [part.strip() for line in lines for part in line.split("&&") if part.strip().startswith("mmreason ")]


@pytest.mark.parametrize("folder", PACKS, ids=[p.name for p in PACKS])
def test_every_pack_folder_has_the_shape(folder):
    assert shape_problems(folder) == []
    module = f"mmreason.tasks.{folder.name}"
    pack = importlib.import_module(module).PACK
    assert pack.name == folder.name and TASKS.get(folder.name) is pack
    assert pack.rewards is importlib.import_module(f"{module}.rewards").REWARDS
    for metric, fn in pack.metrics.items():
        where = getattr(fn, "__module__", "") or ""
        assert not where.startswith("mmreason.tasks.") or where.endswith(".scoring"), (metric, where)
    if pack.baseline is not None:
        assert pack.baseline.__module__ == f"{module}.baseline"
    else:
        assert not (folder / "baseline.py").exists(), f"{folder.name}: baseline.py is not the pack's baseline"


@pytest.mark.parametrize("folder", PACKS, ids=[p.name for p in PACKS])
def test_every_pack_readme_command_parses_and_link_resolves(folder):
    text = (folder / "README.md").read_text()
    for command in _readme_commands(text):
        argv = shlex.split(command)[1:]
        args = build_parser(argv[0]).parse_args(argv)
        if argv[0] in ("train", "sft"):
            assert (ROOT / args.config).is_file(), command
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        assert (folder / target).exists(), f"{folder.name}/README.md -> {target}"


def test_a_folder_that_breaks_the_shape_is_named(tmp_path):
    folder = tmp_path / "mypack"
    folder.mkdir()
    (folder / "__init__.py").write_text("from mmreason.taskpack import register_task\nregister_task(A)\n")
    (folder / "data.py").write_text("from mmreason import taskpack\ntaskpack.register_task(B)\n")
    (folder / "learncheck.py").write_text("")
    (folder / "README.md").write_text("# mypack\n" + "line\n" * README_LINES)
    assert shape_problems(folder) == [
        "mypack: no rewards.py",
        "mypack: no scoring.py",
        "mypack: learncheck.py is named baseline.py in a pack",
        "mypack: one register_task call, in __init__.py, registers the pack; found {'__init__.py': 1, 'data.py': 1}",
        f"mypack: README.md has {README_LINES + 1} lines (one screen: {README_LINES})",
        "mypack: README.md does not link docs/tasks/mypack.md",
    ]
