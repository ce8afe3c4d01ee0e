"""`mmreason list estimators|losses` shows every registered method, and the GRPO-family methods of
docs/methods/estimators.md and docs/methods/losses.md with the arXiv id of their paper, and the provenance of
every method, as the docs state it under the method's heading."""

from mmreason.cli import main
from mmreason.listing import rows

PAPERS = {
    "estimators": {"dgpo": "2601.20614", "opmd": "2509.24203", "asymre": "2506.20520", "disco": "2505.12366"},
    "losses": {
        "opmd": "2509.24203",
        "disco": "2505.12366",
        "holder": "2605.12058",
        "gbpo": "2604.18578",
        "dcpo": "2601.12730",
        "llds": "2512.04220",
    },
    "rollouts": {"refine": "2602.09000", "hint": "2602.03143", "augment": "2506.07464"},
}
# the anchors' objectives (docs/methods/losses.md#on-policy-the-ratio-losses-are-grpo) and the readings of
# abstracts (docs/algorithms.md#readings-of-abstracts) (GEPO and PlanPO: the digest's title)
PAPERS["estimators"] |= {
    "reinforce_pp": "2501.03262",
    "reinforce_pp_baseline": "2501.03262",
    "planpo": "Planning-Aware",
}
PAPERS["losses"] |= {
    "cispo": "2506.13585",
    "sapo": "2511.20347",
    "gmpo": "2507.20673",
    "kl_cov": "2505.22617",
    "clip_cov": "2505.22617",
    "etr": "2601.03723",
    "dhpo": "2601.05607",
    "erpo": "2603.28204",
    "gepo": "Group Entropy-Controlled",
    "conspo": "2605.12969",
    "dagrpo": "2512.06337",
    "r3_rank": "2601.19620",
    "vps": "2604.20659",
}
PAPERS["samplers"] = {"gdro": "2601.19280"}
PAPERS["rollouts"] |= {"anchor": "2601.19620"}


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
