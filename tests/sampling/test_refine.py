"""iGRPO (arXiv 2602.09000): the best draft is the first of the highest reward, NaN never wins, and the
refinement prompt is the original prompt with the draft appended to its last user turn."""

from __future__ import annotations

import math

import pytest

from mmreason.sampling.refine import DEFAULT_TEMPLATE, best_draft, refinement_sample
from mmreason.types import Sample


def _sample(content) -> Sample:
    return Sample(id="s1", messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": content}])


def test_best_draft_is_the_highest_reward_first_on_ties():
    """Worked: rewards [0.2, 0.9, 0.9, 0.1] -> k* = 1 (argmax, the first of the two 0.9s)."""
    assert best_draft([0.2, 0.9, 0.9, 0.1], ["a", "b", "c", "d"]) == 1


def test_best_draft_edge_cases():
    assert best_draft([0.0, 0.0, 0.0], ["a", "b", "c"]) == 0  # all rewards equal: the first draft
    assert best_draft([0.5], ["only"]) == 0  # one sample
    assert best_draft([math.nan, 0.1, math.nan], ["a", "b", "c"]) == 1  # unscored rows never win
    assert best_draft([math.nan, math.nan], ["a", "b"]) is None  # nothing scored: no refinement
    with pytest.raises(ValueError, match="2 rewards for 1 completions"):
        best_draft([0.0, 1.0], ["a"])


def test_refinement_prompt_appends_the_draft_to_the_last_user_turn():
    out = refinement_sample(_sample("What is 2+2?"), "  It is 4.  ")
    assert out.messages[1]["content"] == "What is 2+2?" + DEFAULT_TEMPLATE.replace("{draft}", "It is 4.")
    assert out.messages[0] == {"role": "system", "content": "sys"}

    parts = [{"type": "image"}, {"type": "text", "text": "Which colour?"}]
    out = refinement_sample(_sample(parts), "blue, because ...", template="\nDraft: {draft}", max_draft_chars=4)
    assert out.messages[1]["content"] == [*parts, {"type": "text", "text": "\nDraft: blue"}]  # the draft's start
    assert parts == [{"type": "image"}, {"type": "text", "text": "Which colour?"}]  # the original is untouched


def test_refinement_prompt_errors_name_the_problem():
    with pytest.raises(ValueError, match="must contain"):
        refinement_sample(_sample("q"), "d", template="no slot")
    with pytest.raises(ValueError, match="'s2': no user turn"):
        refinement_sample(Sample(id="s2", messages=[{"role": "system", "content": "x"}]), "d")
