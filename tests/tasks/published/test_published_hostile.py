"""Model output is untrusted: every benchmark scorer takes huge, odd or adversarial responses and returns 0 or 1
(or an ANLS in [0, 1]) without raising."""

from __future__ import annotations

import pytest
from published_files import chartqa_repo, docvqa_json, mathvista_repo, mmmu_folder, videomme_set

from mmreason.tasks.chartqa.data import chartqa_load
from mmreason.tasks.chartqa.scoring import chartqa_relaxed_accuracy
from mmreason.tasks.docvqa.data import docvqa_load
from mmreason.tasks.docvqa.scoring import docvqa_anls_metric
from mmreason.tasks.mathvista.data import mathvista_load
from mmreason.tasks.mathvista.scoring import mathvista_accuracy
from mmreason.tasks.mmmu.data import mmmu_load
from mmreason.tasks.mmmu.scoring import mmmu_accuracy, mmmu_random_fallback
from mmreason.tasks.videomme.data import videomme_load
from mmreason.tasks.videomme.scoring import videomme_accuracy

HOSTILE = [
    "",
    " ",
    "\x00" * 50,
    "(A)" * 20_000,
    "answer is " * 10_000,
    "9" * 50_000,
    "1e99999",
    "-" * 30_000,
    "<answer>" + "x" * 100_000 + "</answer>",
    "\\boxed{" * 5_000,
    "1,000," * 8_000 + "\n" * 10_000,
    "The answer is " + "[" * 3_000 + "]" * 3_000,
    "nan",
    "inf",
    "So the answer is 1e400.",
]


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    return [
        (mathvista_accuracy, mathvista_load(str(mathvista_repo(root / "mv")))),
        (mmmu_accuracy, mmmu_load(str(mmmu_folder(root / "mmmu")))),
        (mmmu_random_fallback, mmmu_load(str(mmmu_folder(root / "mmmu2")))),
        (chartqa_relaxed_accuracy, chartqa_load(str(chartqa_repo(root / "cq")))),
        (docvqa_anls_metric, docvqa_load(str(docvqa_json(root / "dv")))),
        (videomme_accuracy, videomme_load(str(videomme_set(root / "vm")))),
    ]


@pytest.mark.parametrize("response", HOSTILE, ids=range(len(HOSTILE)))
def test_every_scorer_returns_a_score_on_hostile_output(docs, response):
    for metric, samples in docs:
        for sample in samples:
            value = metric(sample, response)
            assert value != value or 0.0 <= value <= 1.0, (metric.__name__, sample.id)  # NaN: does not apply


# ---- hostile benchmark files -----------------------------------------------------------------------------


def test_mathvista_options_past_their_cap_are_one_line_naming_the_row(tmp_path):
    """A 1 MB option (each doc's scoring measured the edit distance to it: 2.1 s a doc) or 27 options are
    refused when the file loads, naming the file, the row and the field."""
    import json

    from published_files import MATHVISTA_ROWS

    from mmreason.tasks.mathvista.data import MAX_CHOICE_CHARS, MAX_CHOICES

    for choices, said in (
        (["a", "x" * 1_000_000], f"choices[1] has 1,000,000 characters, over the cap of {MAX_CHOICE_CHARS:,}"),
        ([str(k) for k in range(MAX_CHOICES + 1)], f"choices has 27 options, over the cap of {MAX_CHOICES}"),
    ):
        path = mathvista_repo(tmp_path / str(len(choices)))
        rows = {**MATHVISTA_ROWS, "3": {**MATHVISTA_ROWS["3"], "choices": choices}}
        path.write_text(json.dumps(rows))
        with pytest.raises(ValueError) as err:
            mathvista_load(str(path))
        assert said in str(err.value) and "testmini.json" in str(err.value) and "3" in str(err.value)
        assert "\n" not in str(err.value)


def test_mathvista_edit_distance_is_clipped():
    """Options compared beyond ``MAX_COMPARE_CHARS`` characters cost nothing more: two options equal in their
    first 20,000 characters tie (the first wins), however they differ after."""
    from mmreason.rewards.textmatch import MAX_COMPARE_CHARS
    from mmreason.tasks.mathvista.scoring import most_similar

    head = "y" * MAX_COMPARE_CHARS
    assert most_similar(head, [head + "z" * 50_000, head]) == head + "z" * 50_000
