"""DocSeeker's rewards: the pack's default list (``REWARDS``) and its own reward, the ALR format
(``docseeker_format``), registered under that name when the pack's rewards load. The evidence and answer rewards
it is weighted with (``page_fbeta``, ``anls``) are shared ones in ``rewards/``."""

from __future__ import annotations

from mmreason.parsing import MAX_CHARS, as_text, parse_dict, parse_schema
from mmreason.rewarding import per_sample, reward
from mmreason.tasks.docseeker.alr import HEADERS

# The paper's weights (EviGRPO_reward.py); run configs may override them.
REWARDS = [
    {"name": "docseeker_format", "weight": 0.1},
    {"name": "page_fbeta", "weight": 0.3, "kwargs": {"beta": 2.0, "index_base": 1}},
    # ANLS keeps the DocVQA 0.5 threshold (the paper trains with 0): without it a fragment that half-matches
    # every answer earns partial credit, a reward a policy can max without reading the document.
    {"name": "anls", "weight": 0.6, "kwargs": {"threshold": 0.5, "extract": "answer_dict"}},
]


def docseeker_format_score(text: str) -> float:
    r"""DocSeeker's R_fmt: think/answer, a dict answer, and the three \boxed{} headers in order.

    1 iff the stripped text is ``<think>..</think> .. <answer>..</answer>`` (DocSeeker allows text
    between the blocks), the answer body parses as a dict (JSON or Python literal), and the stripped
    think body starts with ``\boxed{Question Analysis}`` followed, in order, by
    ``\boxed{Evidence Localization}`` and ``\boxed{Reasoning Process}``.
    Source: ``EviGRPO/verl/utils/reward_score/EviGRPO_reward.py::format_reward``.
    """
    bodies = parse_schema(text, ("think", "answer"), gaps="any")
    if bodies is None or parse_dict(bodies[1]) is None:
        return 0.0
    think = bodies[0].strip()
    if not think.startswith(HEADERS[0]):
        return 0.0
    cursor = len(HEADERS[0])
    for header in HEADERS[1:]:
        found = think.find(header, cursor)
        if found < 0:
            return 0.0
        cursor = found + len(header)
    return 1.0


@reward("docseeker_format")
@per_sample
def docseeker_format(sample, trajectory, *, max_chars: int = MAX_CHARS) -> float:
    r"""DocSeeker ALR format: think with the 3 \boxed{} headers in order, then a JSON answer dict.

    Source: DocSeeker ``EviGRPO_reward.py::format_reward``; docs/methods/packs.md#docseeker (R_fmt).
    """
    text = as_text(trajectory.completion_text)
    return 0.0 if len(text) > max_chars else docseeker_format_score(text)
