"""The algorithm notes the code cites exist: no citation of a document outside the repository, and every
``docs/algorithms.md §N`` names a section that docs/algorithms.md has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "algorithms.md"
SCANNED = ("mmreason", "tasks", "rewards", "configs", "tests", "docs", "README.md")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".jinja", ".txt", ".toml", ".cfg", ".json"}
MISSING_DOC = "ALGORITHMS" + ".md"  # a document that is not part of the repository
CITATION = re.compile(r"docs/algorithms\.md((?:\s*(?:,|and|-|–)?\s*§\s?\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"^#{2,4}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def _files():
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in candidates:
            if f.is_file() and f.suffix in SUFFIXES and "__pycache__" not in f.parts:
                yield f


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def test_nothing_cites_a_document_the_repository_does_not_have():
    offenders = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in _files()
        if f != Path(__file__).resolve()
        for n, line in enumerate(_text(f).splitlines(), 1)
        if MISSING_DOC in line
    ]
    assert not offenders, f"cite docs/algorithms.md §N instead of {MISSING_DOC}: {offenders}"


def test_every_cited_section_exists():
    sections = set(SECTION.findall(_text(DOC)))
    assert {"0", "1", "2", "8.7"} <= sections, sections
    cited = {}
    for f in _files():
        for match in CITATION.finditer(_text(f)):
            for number in re.findall(r"\d+(?:\.\d+)*", match.group(1)):
                cited.setdefault(number, []).append(str(f.relative_to(ROOT)))
    assert cited, "no file cites docs/algorithms.md"
    unknown = {n: where for n, where in cited.items() if n not in sections}
    assert not unknown, f"docs/algorithms.md has no section {sorted(unknown)}: cited in {unknown}"


def _runtime_strings(code: str):
    """String constants a module can use at runtime: every one but bare string statements (docstrings)."""
    tree = ast.parse(code)
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            yield node.value


def test_the_package_does_not_read_docs_at_runtime():
    for folder in ("mmreason", "tasks", "rewards"):
        for f in (ROOT / folder).rglob("*.py"):
            used = [s for s in _runtime_strings(_text(f)) if "docs/" in s or "algorithms.md" in s]
            assert not used, f"{f.relative_to(ROOT)} uses a path under docs/ at runtime: {used}"
