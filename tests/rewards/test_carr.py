"""CaRR citation-aware rubric reward (THUDM/CaRR ``launch_server.py::get_rubric_reward``): fill, support by cited
evidence, BFS from <E0>, share of all rubrics; worked by hand on a four-rubric question."""

from __future__ import annotations

import pytest
import torch

from mmreason.rewarding import REWARDS
from mmreason.rewards.carr import connected, fill_rubric, rubric_entities, rubric_score
from mmreason.types import Sample, Trajectory, Turn

RUBRICS = ["<E1> was born in <E2>", "<E0> was written by <E1>", "<E3> is a river in <E2>", "<E4> won the prize"]
ENTITIES = {"E1": "Frank Herbert", "E2": "Tacoma", "E3": "Puyallup", "E4": "Nobody"}
PASSAGES = ["Frank Herbert was born in Tacoma, Washington.", "Dune is a novel by Frank Herbert."]


def _sample(rubrics=RUBRICS, **meta) -> Sample:
    return Sample(
        id="q1",
        messages=[{"role": "user", "content": "Which novel?"}],
        answer="Dune",
        meta={"rubrics": rubrics, "rubric_entities": ENTITIES, **meta},
    )


def _traj(text: str, observations=PASSAGES) -> Trajectory:
    turns = [Turn("observation", o, 0, 1) for o in observations] + [Turn("assistant", text, 1, 2)]
    return Trajectory("q1", 0, torch.zeros(2, dtype=torch.long), torch.ones(2, dtype=torch.long), 0, text, turns=turns)


def _score(samples, trajectories, **kwargs):
    return REWARDS.get("carr_rubric")(samples, trajectories, **kwargs)


def test_pieces():
    assert rubric_entities("<E1> wrote <E0>, as <E1> said") == ["E1", "E0"]
    assert fill_rubric("<E1> wrote <E0>", {"E0": "Dune", "E1": None}) == ("<E1> wrote Dune", False)
    # BFS: E0 -> rubric 1 -> E1 -> rubric 0 -> E2; rubric 2 (E3, E2) is unsupported, rubric 3 is cut off
    assert connected(RUBRICS, [True, True, False, True]) == {0, 1}
    assert connected(RUBRICS, [True, False, True, True]) == set()  # nothing holds E0
    with pytest.raises(ValueError, match="no rubrics"):
        rubric_score([], {}, lambda filled, names: True)


def test_worked_example():
    """Response names Dune (E0), Frank Herbert (E1), Tacoma (E2); not Puyallup (E3) nor Nobody (E4).
    c1 "Frank Herbert was born in Tacoma": both names in passage 1 -> supported; c2 "Dune was written by Frank
    Herbert": passage 2 -> supported; c3 and c4 hold an unidentified entity -> 0. BFS from E0 reaches c2, then
    (via E1) c1. R = 2/4 = 0.5, supported 2/4 = 0.5."""
    out = _score([_sample()], [_traj("Frank Herbert, born in Tacoma, wrote it. <answer>Dune</answer>")])
    assert out == {"rubric": [0.5], "supported": [0.5]}


def test_a_supported_rubric_not_linked_to_the_answer_does_not_count():
    """Naming Nobody, with a passage "Nobody won the prize": c4 is supported (3/4) but not connected to E0: R
    stays 2/4. Without naming the answer, nothing connects: R = 0 while c1 is still supported (1/4)."""
    passages = [*PASSAGES, "Nobody won the prize in 1966."]
    text = "Frank Herbert, born in Tacoma, wrote it; Nobody won the prize. <answer>Dune</answer>"
    assert _score([_sample()], [_traj(text, passages)]) == {"rubric": [0.5], "supported": [0.75]}
    assert _score([_sample()], [_traj("Frank Herbert, born in Tacoma.", passages)]) == {
        "rubric": [0.0],
        "supported": [0.25],
    }


def test_edge_cases():
    full = "Frank Herbert, born in Tacoma, wrote Dune."
    assert _score([_sample()], [_traj(full, observations=[])]) == {"rubric": [0.0], "supported": [0.0]}  # no evidence
    assert _score([_sample(rubrics=[])], [_traj(full)]) == {"rubric": [None], "supported": [None]}  # does not apply
    one = _sample(rubrics=["<E0> was written by <E1>"])
    assert _score([one], [_traj(full)]) == {"rubric": [1.0], "supported": [1.0]}  # one rubric, all supported
    assert _score([one], [_traj("dunes of Tacoma")])["rubric"] == [0.0]  # "Dune" only as part of a word
    with pytest.raises(ValueError, match="'q1': rubrics must be a list of strings"):
        _score([_sample(rubrics="<E0>")], [_traj(full)])
    with pytest.raises(ValueError, match="evidence must be"):
        _score([_sample()], [_traj(full)], evidence="web")


def test_docseeker_pages_cite_the_evidence():
    """evidence="pages": the units are the texts of the pages in the answer's evidence_pages (1-based)."""
    sample = _sample(
        rubrics=["<E0> was written by <E1>", "<E1> was born in <E2>"],
        page_texts=["Frank Herbert was born in Tacoma.", "Dune is a novel by Frank Herbert.", "Index"],
    )
    answer = 'Frank Herbert of Tacoma. <answer>{"evidence_pages": [2], "answer": "Dune"}</answer>'
    assert _score([sample], [_traj(answer, [])], evidence="pages") == {"rubric": [0.5], "supported": [0.5]}
    both = answer.replace("[2]", "[1, 2, 9]")  # a page past the document is ignored
    assert _score([sample], [_traj(both, [])], evidence="pages") == {"rubric": [1.0], "supported": [1.0]}
