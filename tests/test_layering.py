"""The rooms import one way: the engine never imports the plug-in folders (tasks/, rewards/: it finds them by
registry), the harness never imports the trainer, the RL math imports no other room, and the benchmarks sit on
top: nothing in the library imports them, and only they may import TRL."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mmreason"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def _room(room: str) -> list[Path]:
    return sorted((PACKAGE / room).rglob("*.py")) if (PACKAGE / room).is_dir() else [PACKAGE / f"{room}.py"]


@pytest.mark.parametrize(
    "room, forbidden",
    [
        ("eval", ("mmreason.train",)),
        ("rl", ("mmreason.train", "mmreason.eval", "mmreason.rollout", "mmreason.models", "mmreason.rewarding")),
        ("rollout", ("mmreason.train", "mmreason.eval", "mmreason.rewarding", "mmreason.sampling")),
        ("models", ("mmreason.train", "mmreason.eval", "mmreason.rollout")),
        ("health", ("mmreason.train", "mmreason.eval", "mmreason.rollout", "mmreason.rewarding", "mmreason.sampling")),
        (
            "parallel",
            ("mmreason.train", "mmreason.eval", "mmreason.rollout", "mmreason.rewarding", "mmreason.sampling"),
        ),
        (
            "media",
            (
                "mmreason.train",
                "mmreason.eval",
                "mmreason.rollout",
                "mmreason.rewarding",
                "mmreason.sampling",
                "mmreason.models",
            ),
        ),
        ("rewarding", ("mmreason.train", "mmreason.eval", "mmreason.rollout", "mmreason.sampling")),
        ("sampling", ("mmreason.train", "mmreason.eval")),
    ],
)
def test_room_does_not_import_upward(room, forbidden):
    bad = [(p.relative_to(PACKAGE), m) for p in _room(room) for m in _imports(p) if m.startswith(forbidden)]
    assert not bad, bad


def test_engine_never_imports_the_plugin_folders():
    """Only the registries' discovery imports the folders as packages (to list their modules)."""
    bad = [
        (p.relative_to(PACKAGE), m)
        for p in PACKAGE.rglob("*.py")
        for m in _imports(p)
        if m.startswith(("mmreason.rewards.", "mmreason.tasks."))
    ]
    assert not bad, bad


def test_nothing_in_the_library_imports_the_benchmarks():
    """`mmreason/bench/` measures the library; the CLI reaches it by module name, nothing imports it."""
    bench = PACKAGE / "bench"
    bad = [
        (p.relative_to(PACKAGE), m)
        for p in PACKAGE.rglob("*.py")
        if bench not in p.parents
        for m in _imports(p)
        if m == "mmreason.bench" or m.startswith("mmreason.bench.")
    ]
    assert not bad, bad


@pytest.mark.parametrize("room", ["train", "eval", "rollout"])
def test_training_and_evaluation_never_import_trl(room):
    """TRL is a dev extra used only by `mmreason bench grpo-vs-trl` and the oracle tests."""
    bad = [(p.relative_to(PACKAGE), m) for p in _room(room) for m in _imports(p) if m == "trl" or m.startswith("trl.")]
    assert not bad, bad


ROOT = PACKAGE.parent


def _plugin_imports(folder: str) -> list[tuple[str, str]]:
    return [(p.relative_to(ROOT).as_posix(), m) for p in sorted((ROOT / folder).rglob("*.py")) for m in _imports(p)]


def test_shared_rewards_never_import_a_pack():
    """rewards/ holds what packs share; a reward only one pack uses lives in that pack (tasks/<pack>/rewards.py)."""
    bad = [(p, m) for p, m in _plugin_imports("rewards") if m.startswith("mmreason.tasks")]
    assert not bad, bad


def test_packs_never_import_the_benchmarks_or_the_trainer():
    """A pack gives data, prompts, rewards, metrics and an environment to the engine; it does not drive it."""
    bad = [(p, m) for p, m in _plugin_imports("tasks") if m.startswith(("mmreason.bench", "mmreason.train"))]
    assert not bad, bad


def _pack_imports(path: Path) -> set[str]:
    """Modules ``path`` imports, with ``from mmreason.tasks import x`` read as ``mmreason.tasks.x``."""
    out = set(_imports(path))
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "mmreason.tasks" and node.level == 0:
            out |= {f"mmreason.tasks.{a.name}" for a in node.names}
    return out


def test_packs_never_import_another_pack():
    """A pack imports the engine and the shared rewards, never another pack: what two packs share lives below
    them (e.g. ``mmreason.rows`` for row-field parsing), so each pack folder can be read, moved or dropped alone."""
    bad = []
    for path in sorted((ROOT / "tasks").rglob("*.py")):
        parts = path.relative_to(ROOT / "tasks").parts
        if len(parts) < 2:
            continue  # tasks/__init__.py
        own = f"mmreason.tasks.{parts[0]}"
        bad += [
            (path.relative_to(ROOT).as_posix(), m)
            for m in _pack_imports(path)
            if m.startswith("mmreason.tasks.") and m != own and not m.startswith(own + ".")
        ]
    assert not bad, bad
