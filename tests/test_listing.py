"""`mmreason list estimators|losses` shows every registered method, and the GRPO-family methods of
docs/algorithms.md §11 with the arXiv id of their paper."""

from mmreason.cli import main
from mmreason.listing import rows

PAPERS = {
    "estimators": {"dgpo": "2601.20614", "opmd": "2509.24203", "asymre": "2506.20520", "disco": "2505.12366"},
    "losses": {"opmd": "2509.24203", "disco": "2505.12366", "holder": "2605.12058", "gbpo": "2604.18578",
               "dcpo": "2601.12730", "llds": "2512.04220"},
    "rollouts": {"refine": "2602.09000", "hint": "2602.03143", "augment": "2506.07464"},
}


def test_list_names_the_paper_of_each_family_method():
    for kind, papers in PAPERS.items():
        described = dict(rows(kind))
        for name, arxiv in papers.items():
            assert arxiv in described[name], (kind, name, described[name])


def test_list_losses_runs_from_the_cli(capsys):
    assert main(["list", "losses"]) == 0
    out = capsys.readouterr().out
    for name in ("clipped", "reg_grpo", "opmd", "disco", "holder", "gbpo", "dcpo", "llds"):
        assert name in out


def test_list_samplers_and_rollout_variants_run_from_the_cli(capsys):
    assert main(["list", "samplers"]) == 0
    assert main(["list", "rollouts"]) == 0
    out = capsys.readouterr().out
    for name in ("uniform", "vas", "augment", "refine", "hint"):
        assert name in out
