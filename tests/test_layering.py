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


# ---- the whole import graph: every import, at the top or inside a function ---------------------------------

MODULES = {
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p for p in PACKAGE.rglob("*.py")
}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _edges(name: str, path: Path) -> set[str]:
    """The package modules ``name`` imports, at the top or in any function body: ``from a import b`` is module
    ``a.b`` when that is a module, else ``a``; relative imports are resolved; an ``if TYPE_CHECKING:`` block is
    no import at run time and is left out."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            for a in node.names:
                out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in out if m in MODULES and m != name}


GRAPH = {name: _edges(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


def _package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def test_no_import_cycle_anywhere():
    """No two modules import each other, directly or around a loop, counting the imports inside functions (a
    function-level import that closes a loop hides the cycle from Python, not from a reader). A package's
    ``__init__`` re-exporting its own modules is no cycle of the design: edges into a package's own
    ``__init__`` from inside it are left out."""
    graph = {
        v: {w for w in ws if not (MODULES[w].name == "__init__.py" and v.startswith(w + "."))}
        for v, ws in GRAPH.items()
    }
    assert not _cycles(graph), _cycles(graph)


def test_rooms_do_not_import_upward_inside_functions():
    """The room rules above hold for the imports inside function bodies too."""
    rules = dict(test_room_does_not_import_upward.pytestmark[0].args[1])
    bad = [
        (name, m)
        for name in GRAPH
        for room, forbidden in rules.items()
        if name.startswith(f"mmreason.{room}.") or name == f"mmreason.{room}"
        for m in GRAPH[name]
        if m.startswith(forbidden)
    ]
    assert not bad, bad


UPPER_ROOMS = ("mmreason.train", "mmreason.eval", "mmreason.rollout", "mmreason.sampling", "mmreason.rewarding")
ENTRY_POINTS = {"mmreason.cli", "mmreason.__main__", "mmreason.listing", "mmreason.datacmd"}


def test_root_modules_sit_below_the_rooms():
    """The modules at the package root (``rundir``, ``paths``, ``config``, ``types`` ...) are the ground floor:
    none imports the trainer, the harness, the rollout engine, the samplers or the reward runner, at the top
    or inside a function (the command-line entry points reach the rooms by module name)."""
    bad = [
        (name, m)
        for name in GRAPH
        if MODULES[name].parent == PACKAGE and MODULES[name].name != "__init__.py" and name not in ENTRY_POINTS
        for m in GRAPH[name]
        if m.startswith(UPPER_ROOMS)
    ]
    assert not bad, bad
