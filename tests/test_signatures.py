"""No function takes 10 or more positional parameters: past the first few, parameters are keyword-only, so a call
names what it passes (``run_episodes(..., max_turns=3, max_context=4096, seed=0, step=1)``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOST_POSITIONAL = 9


def _wide_functions() -> list[str]:
    out = []
    for folder in ("mmreason", "tasks", "rewards"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = node.args.posonlyargs + node.args.args
                    positional = [a for a in args if a.arg not in ("self", "cls")]
                    if len(positional) > MOST_POSITIONAL:
                        out.append(f"{path.relative_to(ROOT).as_posix()}:{node.name}")
    return out


def test_no_function_takes_ten_positional_parameters():
    wide = _wide_functions()
    assert not wide, f"make the parameters past the first few keyword-only: {wide}"
