"""Text-only baseline: answer every question with the most frequent training answer of its template.

A model that beats it must be reading the image: the baseline knows the question's wording, the answer
priors of each wording (e.g. "is there a {colour} shape?" is "no" 88 % of the time in easy-VQA), and
nothing else. The template is the ``template`` column (easy-VQA: colour / shape words replaced), else
the question text itself; an unseen template gets the overall most frequent answer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from mmreason.tasks.vision.scoring import is_correct
from mmreason.types import Sample


def template_key(sample: Sample) -> str:
    return str(sample.meta.get("template") or sample.prompt_text)


@dataclass
class Baseline:
    """The majority answer of each template, fitted on training samples."""

    answers: dict[str, str]
    fallback: str

    @classmethod
    def fit(cls, train: list[Sample]) -> Baseline:
        if not train:
            raise ValueError("text-only baseline: no training samples to fit")
        counts: dict[str, Counter] = defaultdict(Counter)
        for s in train:
            counts[template_key(s)][str(s.answer)] += 1
        overall = Counter(str(s.answer) for s in train)
        # ties break by answer text so the baseline does not depend on data order
        answers = {t: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for t, c in counts.items()}
        return cls(answers, min(overall.items(), key=lambda kv: (-kv[1], kv[0]))[0])

    def predict(self, sample: Sample) -> str:
        return self.answers.get(template_key(sample), self.fallback)

    def accuracy(self, samples: list[Sample]) -> float:
        if not samples:
            return float("nan")
        return sum(is_correct(s, self.predict(s)) for s in samples) / len(samples)


def baseline_rule(train: list[Sample]) -> Callable[[Sample], str]:
    """The majority answer of the question's template, as the completion (``mmreason eval baseline --task vision``)."""
    return Baseline.fit(train).predict
