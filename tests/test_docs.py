"""The docs hold: no citation of a document outside the repository, every cited method anchor
(``docs/methods/losses.md#cispo``) names a heading its page has, every registered method has its heading, the README
stays a front door (at most 250 lines, its two commands first, a line per pack and per
engine file), every `mmreason ...` command in the docs parses with the real CLI, and CHANGELOG.md keeps its
release / subsection layout."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCANNED = ("mmreason", "tasks", "rewards", "configs", "tests", "docs", "README.md")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".jinja", ".txt", ".toml", ".cfg", ".json"}
MISSING_DOC = "ALGORITHMS" + ".md"  # a document that is not part of the repository
CITATION = re.compile(r"docs/((?:methods/)?[\w-]+\.md)#([\w-]+)")  # docs/methods/losses.md#cispo
OLD_CITATION = re.compile(r"algorithms\.md\)?\s*§")  # the section numbers these anchors replaced
# registry kind (`mmreason list KIND`) -> the page that holds a heading per registered name
METHOD_PAGES = {
    "estimators": "methods/estimators.md",
    "losses": "methods/losses.md",
    "aggregations": "methods/aggregation-and-kl.md",
    "kl": "methods/aggregation-and-kl.md",
    "samplers": "methods/samplers.md",
    "rollouts": "methods/within-step.md",
}


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
    assert not offenders, f"cite docs/methods/<kind>.md#<name> instead of {MISSING_DOC}: {offenders}"


def slug(heading: str) -> str:
    """Return GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Return the anchors of a markdown page's headings (code blocks skipped; a repeated slug gets ``-1``, ``-2``)."""
    found: set[str] = set()
    text = re.sub(r"```.*?```", "", _text(page), flags=re.DOTALL)
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, re.MULTILINE):
        base, n = slug(heading), 0
        while (base if n == 0 else f"{base}-{n}") in found:
            n += 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_slugs_follow_github():
    assert slug("`reinforce_pp_baseline`") == "reinforce_pp_baseline"
    assert slug("On-policy, the ratio losses are GRPO") == "on-policy-the-ratio-losses-are-grpo"
    assert slug("DeepVideo-R1") == "deepvideo-r1" and slug("Log-probs") == "log-probs"


def test_every_cited_anchor_exists():
    cited: dict[tuple[str, str], list[str]] = {}
    for f in _files():
        for page, anchor in CITATION.findall(_text(f)):
            cited.setdefault((page, anchor), []).append(str(f.relative_to(ROOT)))
    assert len(cited) >= 60, f"only {len(cited)} method anchors cited"
    unknown = {
        f"docs/{page}#{anchor}": where
        for (page, anchor), where in cited.items()
        if not (DOCS / page).is_file() or anchor not in anchors(DOCS / page)
    }
    assert not unknown, f"cited anchors with no heading: {unknown}"


def test_nothing_cites_a_section_number():
    offenders = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in _files()
        for n, line in enumerate(_text(f).splitlines(), 1)
        if OLD_CITATION.search(line) or (f.parent.name == "methods" and "§" in line)
    ]
    assert not offenders, f"cite a method by anchor (docs/methods/losses.md#cispo), not by section: {offenders}"


def test_links_between_the_docs_name_headings_that_exist():
    bad = []
    for path in sorted(DOCS.rglob("*.md")):
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", _text(path)):
            page = (path.parent / target) if target else path
            if page.suffix == ".md" and page.is_file() and anchor not in anchors(page):
                bad.append(f"{path.relative_to(ROOT)} -> {target}#{anchor}")
    assert not bad, bad


def test_every_registered_method_has_its_heading():
    from mmreason.listing import provenances

    missing = []
    for kind, page in METHOD_PAGES.items():
        headings = anchors(DOCS / page)
        missing += [f"{page}#{name}" for name in provenances(kind) if name not in headings]
    assert not missing, f"registered methods without a heading of their own: {missing}"


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


# ---- the README is a front door; every command in the docs parses ---------------------------------------

README = ROOT / "README.md"
SETUP = (
    "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.14.1 torchvision==0.29.1 && "
    'pip install -e ".[dev]" && mmreason tiny-model runs/tiny-model && mmreason sft configs/quickstart_sft.yaml '
    "&& mmreason train configs/quickstart.yaml"
)
COMMAND_DOCS = [
    README,
    ROOT / "rewards" / "README.md",
    ROOT / "mmreason" / "bench" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]


def _bash_blocks(path: Path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", _text(path), re.DOTALL)


def _commands(block: str) -> list[str]:
    """The `mmreason ...` commands of a bash block: continuation lines joined, comments dropped, `&&` split,
    shell variables replaced by a placeholder (a loop's body counts as a command)."""
    text = block.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        for part in re.split(r"&&|;", line):
            part = part.strip()
            if part.startswith("python -m mmreason "):
                part = part[len("python -m ") :]
            if part.startswith("mmreason "):
                out.append(re.sub(r"\$\([^)]*\)|\$\{?\w+\}?", "VAR", part))
    return out


def test_the_readme_is_a_front_door():
    lines = _text(README).splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; per-pack material goes to docs/tasks/<pack>.md"
    blocks = _bash_blocks(README)
    assert blocks[0].strip() == SETUP and blocks[1].strip() == "python -m pytest -q -n 2"  # the two commands, first
    for pack in sorted(p.parent.name for p in (ROOT / "tasks").glob("*/__init__.py")):
        assert f"| `{pack}` |" in _text(README), f"the README's task-pack table has no line for {pack!r}"
        assert (ROOT / "docs" / "tasks" / f"{pack}.md").is_file(), f"docs/tasks/{pack}.md is missing"


def test_the_architecture_page_maps_every_file_of_the_engine():
    text = _text(ROOT / "docs" / "architecture.md")
    missing = [
        p.relative_to(ROOT / "mmreason").as_posix()
        for p in sorted((ROOT / "mmreason").rglob("*"))
        if p.is_file()
        and p.suffix in {".py", ".jinja"}
        and p.name != "__init__.py"
        and "__pycache__" not in p.parts
        and p.name not in text
    ]
    assert not missing, f"docs/architecture.md's file map does not name {missing}"


def test_every_documented_command_parses_and_names_what_exists():
    """Each `mmreason ...` command in the docs parses with the real CLI; a recipe it names exists and loads with
    its overrides. (The README's main job runs end to end in tests/train/test_train_e2e.py.)"""
    from mmreason.cli import build_parser
    from mmreason.config import load_config
    from mmreason.train.config import TrainConfig

    checked, bad = 0, []
    for path in COMMAND_DOCS:
        for block in _bash_blocks(path):
            for command in _commands(block):
                argv = shlex.split(command)[1:]
                where = f"{path.relative_to(ROOT)}: {command}"
                try:
                    args = build_parser(argv[0]).parse_args(argv)
                except SystemExit:
                    bad.append(where)
                    continue
                checked += 1
                if argv[0] in ("train", "sft") and "VAR" not in args.config:  # a loop's recipe is not checked
                    recipe = ROOT / args.config
                    if not recipe.is_file():
                        bad.append(f"{where} (no recipe {args.config})")
                    elif not any("VAR" in o for o in args.overrides):
                        load_config(TrainConfig, recipe, list(args.overrides))
    assert not bad, "commands in the docs that do not parse:\n" + "\n".join(bad)
    assert checked >= 40, checked


def test_relative_links_in_the_docs_point_at_files_that_exist():
    bad = []
    for path in COMMAND_DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _text(path)):
            if "://" not in target and not (path.parent / target).exists():
                bad.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not bad, bad


CHANGELOG_KINDS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}  # Keep a Changelog's


def test_the_changelog_is_laid_out_by_release_and_kind():
    """Every `## ` release holds only `### Added|Changed|Deprecated|Removed|Fixed|Security` subsections, each once,
    and no bullet sits directly under a release heading, so a reader finds what was fixed in a release at once."""
    bad, release, kinds = [], None, []
    for n, line in enumerate(_text(ROOT / "CHANGELOG.md").splitlines(), 1):
        if line.startswith("## "):
            release, kinds = line[3:], []
        elif line.startswith("#") and release is not None:
            kind = line.lstrip("#").strip()
            if not line.startswith("### ") or kind not in CHANGELOG_KINDS:
                bad.append(f"{n}: {line!r} is not one of ### {'|'.join(sorted(CHANGELOG_KINDS))}")
            elif kind in kinds:
                bad.append(f"{n}: a second ### {kind} under {release!r}")
            kinds.append(kind)
        elif line.startswith(("- ", "* ")) and release is not None and not kinds:
            bad.append(f"{n}: a bullet directly under {release!r}, outside any ### subsection")
    assert release is not None, "CHANGELOG.md has no ## release section"
    assert not bad, "CHANGELOG.md:\n" + "\n".join(bad)
