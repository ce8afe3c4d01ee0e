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
