"""No function in the package takes more than 5 positional parameters (``self`` / ``cls`` not counted): past
five, a call reads as a row of values whose meaning depends on their order, so the rest are keyword-only
(``*``). The one exception is ``torch.autograd.Function.forward``, whose parameters are ``apply``'s
positional arguments by torch's design."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mmreason"
MOST = 5


def _autograd_forward(fn: ast.FunctionDef | ast.AsyncFunctionDef, parents: list[ast.AST]) -> bool:
    cls = parents[-1] if parents else None
    return (
        fn.name == "forward"
        and isinstance(cls, ast.ClassDef)
        and any(ast.unparse(b).endswith("autograd.Function") for b in cls.bases)
    )


def _too_many(path: Path) -> list[str]:
    out = []

    def walk(node: ast.AST, parents: list[ast.AST]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                positional = [a.arg for a in child.args.posonlyargs + child.args.args]
                if positional[:1] in (["self"], ["cls"]):
                    positional = positional[1:]
                if len(positional) > MOST and not _autograd_forward(child, parents):
                    out.append(f"{path.relative_to(PACKAGE.parent)}:{child.lineno} {child.name} ({len(positional)})")
            walk(child, [*parents, child])

    walk(ast.parse(path.read_text()), [])
    return out


def test_no_function_takes_more_than_five_positional_parameters():
    bad = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _too_many(path)]
    assert not bad, bad
