"""Keep the type-checked rooms annotated: every def names its parameter and return types.

mypy skips the bodies of unannotated functions unless told otherwise, and reports a missing annotation only under
`disallow_untyped_defs`; this walk is the fast, always-run form of that rule over `[tool.mypy] files` in
pyproject.toml, the one list that `.ci/run` and pre-commit also type-check.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the suite runs on 3.11+, the package supports 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def checked_rooms() -> list[str]:
    """Read the type-checked rooms from pyproject.toml so the test follows the one list."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["mypy"]["files"])


def room_files(room: str) -> list[Path]:
    """List the Python files of a room: a package folder, a module, or a glob (``mmreason/*.py``)."""
    if any(c in room for c in "*?["):
        return sorted(ROOT.glob(room))
    path = ROOT / room
    return [path] if path.is_file() else sorted(path.rglob("*.py"))


def missing_annotations(source: str, filename: str) -> list[str]:
    """Name each def in `source` whose parameters or return lack an annotation, as `file:line name: what`."""
    tree = ast.parse(source, filename)
    methods = {
        id(node)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        positional = args.posonlyargs + args.args
        if id(node) in methods:  # self / cls, whatever its name: the checker knows its type
            positional = positional[1:]
        params = positional + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a is not None]
        unannotated = [a.arg for a in params if a.annotation is None]
        what = [f"parameter {name!r}" for name in unannotated]
        if node.returns is None:
            what.append("return")
        if what:
            found.append(f"{filename}:{node.lineno} {node.name}: no annotation for {', '.join(what)}")
    return found


def test_rooms_are_listed_once_in_pyproject() -> None:
    """The room list lives in pyproject.toml; .ci/run and pre-commit run plain `python -m mypy` on it."""
    rooms = checked_rooms()
    assert "mmreason/eval" in rooms and "mmreason/rl" in rooms
    assert all(room_files(room) for room in rooms), rooms
    assert "python -m mypy\n" in (ROOT / ".ci" / "run").read_text()
    assert "python -m mypy" in (ROOT / ".pre-commit-config.yaml").read_text()


@pytest.mark.parametrize("room", checked_rooms())
def test_every_def_in_a_checked_room_is_annotated(room: str) -> None:
    """Fail on any def in a checked room that leaves a parameter (past self/cls) or its return unannotated."""
    problems = []
    for path in room_files(room):
        problems += missing_annotations(path.read_text(), str(path.relative_to(ROOT)))
    assert not problems, "annotate these defs (the room is type-checked):\n" + "\n".join(problems)


def test_the_walk_finds_each_kind_of_gap() -> None:
    """Check the walk itself on hand-written defs: a bare parameter, a bare return, *args, a static method's
    first parameter, a nested function's, and clean defs (a method's first parameter needs none)."""
    source = (
        "def a(x) -> int: ...\n"
        "def b(x: int): ...\n"
        "class C:\n"
        "    def m(self, *args) -> None: ...\n"
        "    @classmethod\n"
        "    def k(cls, y: int) -> None: ...\n"
        "    def n(__self, y: int) -> None:\n"
        "        def inner(self) -> None: ...\n"
        "    @staticmethod\n"
        "    def s(self) -> None: ...\n"
        "async def d(*, z: int = 1, **kw: str) -> None: ...\n"
    )
    assert sorted(missing_annotations(source, "f.py")) == [
        "f.py:1 a: no annotation for parameter 'x'",
        "f.py:10 s: no annotation for parameter 'self'",
        "f.py:2 b: no annotation for return",
        "f.py:4 m: no annotation for parameter 'args'",
        "f.py:8 inner: no annotation for parameter 'self'",
    ]
