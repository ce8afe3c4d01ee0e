"""Every registered method states its provenance (where its formula comes from) as a registry field; `mmreason list`
prints it as a column, and the docs repeat it under the method's heading (docs/algorithms.md#provenance)."""

import re
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.listing import METHOD_KINDS, provenances
from mmreason.registry import PROVENANCES, Registry
from tests.test_docs import METHOD_PAGES, slug

DOCS = Path(__file__).resolve().parents[1] / "docs"

# The methods known only from their abstracts (docs/algorithms.md#readings-of-abstracts, and iGRPO's `refine`, whose
# section says the same), and those whose specification is the authors' released code.
ABSTRACT_ONLY = {
    "estimators": {"planpo"},
    "losses": {"etr", "dhpo", "erpo", "gepo", "conspo", "dagrpo", "r3_rank", "vps"},
    "samplers": {"gdro"},
    "rollouts": {"anchor", "refine"},
}
AUTHORS_CODE = {
    "estimators": {"dgpo", "opmd", "asymre", "disco", "mc_grpo", "step_grpo"},
    "losses": {"opmd", "disco", "holder", "gbpo", "dcpo"},
    "rollouts": {"hint"},
}


def test_every_registered_method_states_a_known_provenance():
    for kind in METHOD_KINDS:
        stated = provenances(kind)
        assert stated, kind
        unknown = {name: value for name, value in stated.items() if value not in PROVENANCES}
        assert not unknown, f"{kind} without a provenance of {sorted(PROVENANCES)}: {unknown}"


def test_the_readings_of_abstracts_and_the_authors_code_are_marked_as_such():
    for kind in METHOD_KINDS:
        stated = provenances(kind)
        assert {n for n, v in stated.items() if v == "abstract only"} == ABSTRACT_ONLY.get(kind, set()), kind
        assert {n for n, v in stated.items() if v == "authors' code"} == AUTHORS_CODE.get(kind, set()), kind
    assert provenances("losses")["llds"] == "re-implementations"
    assert provenances("estimators")["ga_grpo"] == "proposed"


def _stated_in_docs(page: Path) -> dict[str, str]:
    """Return heading anchor -> the value of the *Provenance: ...* line that follows it."""
    text = page.read_text(encoding="utf-8")
    pairs = re.findall(r"^#{2,4} (.+)\n\n\*Provenance: (.+?)\.\*$", text, re.MULTILINE)
    return {slug(heading): value for heading, value in pairs}


def test_the_docs_state_the_registry_provenance_under_each_heading():
    for kind, page in METHOD_PAGES.items():
        in_docs = _stated_in_docs(DOCS / page)
        for name, value in provenances(kind).items():
            assert in_docs.get(name) == value, f"docs/{page}#{name}: docs say {in_docs.get(name)!r}, registry {value!r}"


def test_list_prints_the_provenance_column(capsys):
    assert main(["list", "losses"]) == 0
    out = capsys.readouterr().out
    assert "provenance" in out
    row = next(line for line in out.splitlines() if "│ vps " in line)
    assert "abstract only" in row
    assert main(["list", "kl"]) == 0 and main(["list", "aggregations"]) == 0
    out = capsys.readouterr().out
    assert "low_var_kl" in out and "seq_mean_token_sum_norm" in out and "standard" in out


def test_an_unknown_provenance_is_refused_naming_it():
    registry: Registry = Registry("estimator")
    with pytest.raises(ValueError, match="'from a dream'"):
        registry.add("x", print, provenance="from a dream")
    registry.add("y", print, provenance="equations")
    assert registry.provenance("y") == "equations" and registry.provenance("z") == ""
