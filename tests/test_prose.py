"""The prose rules of CONTRIBUTING.md ("How code is written here") hold in the rooms done so far: every function's
docstring summary starts with an imperative verb ("Return ...", not "Returns ..." or "The ..."), and no trailing
comment is over 60 characters (a longer one goes on its own line above the code). Class and module docstrings may
be noun phrases: they name things."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the rooms checked so far (globs under the repository root); add one once its prose follows the rules
ROOMS = ("mmreason/train/**/*.py", "mmreason/rollout/**/*.py", "mmreason/parallel/**/*.py")
MAX_TRAILING_COMMENT = 60  # characters, "#" included
# Imperative verbs that open a summary. A new verb is welcome: add it here (base form, capitalised).
VERBS = frozenset(
    """
    Accumulate Add Adopt Append Apply Ask Attend Average Await Broadcast Build Call Cast Check Checkpoint Claim
    Clear Close Collate Collect Compute Concatenate Copy Count Cut Decide Declare Decode Describe Draw Drop
    Encode End Exit Find Finish Flush Forget Gather Generate Get Give Group Halve Handle Hold Join Keep Launch
    Leave Let List Load Log Make Map Mark Mask Measure Merge Name Narrow Note Open Order Pack Parse Pass Place
    Plan Play Poll Post Prepare Push Put Raise Read Receive Record Redo Refresh Refuse Release Remove Render
    Repeat Replay Report Resolve Rest Restore Restrict Return Roll Run Sample Save Say Score Send Serve Set
    Settle Shut Size Sleep Sort Spare Split Spread Stack Stamp Start Step Stop Take Tell Tokenize Try Turn Wait
    Wake Wrap Write Yield
    """.split()
)


def _files():
    for room in ROOMS:
        yield from sorted(ROOT.glob(room))


def _summary_opening(docstring: str) -> str:
    return docstring.split()[0].rstrip(",:;.")


def bad_summaries(source: str) -> list[str]:
    """Return ``line: name: summary`` for each function whose docstring summary does not open with a listed verb."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc and _summary_opening(doc) not in VERBS:
                found.append(f"{node.lineno}: {node.name}: {doc.splitlines()[0][:80]}")
    return found


def long_trailing_comments(source: str) -> list[str]:
    """Return ``line: comment`` for each comment over the limit that shares its line with code."""
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    code_lines = {t.start[0] for t in tokens if t.type not in skip}
    return [
        f"{t.start[0]}: {t.string[:80]}"
        for t in tokens
        if t.type == tokenize.COMMENT and t.start[0] in code_lines and len(t.string) > MAX_TRAILING_COMMENT
    ]


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: str(p.relative_to(ROOT)))
def test_prose(path):
    source = path.read_text()
    summaries, comments = bad_summaries(source), long_trailing_comments(source)
    assert not summaries, f"{path.relative_to(ROOT)}: summaries that do not start with a verb: {summaries}"
    assert not comments, f"{path.relative_to(ROOT)}: trailing comments over {MAX_TRAILING_COMMENT} chars: {comments}"


def test_the_checks_find_what_they_check():
    source = '''
def f():
    """The answer."""
    return 1  # a trailing comment that runs on well past the limit of sixty characters


def g():
    """Return the answer."""
    # a comment line of its own may be as long as the line allows, and it is not a trailing comment
    return 1  # short
'''
    assert bad_summaries(source) == ["2: f: The answer."]
    assert [c.split(":")[0] for c in long_trailing_comments(source)] == ["4"]
