"""DocSeeker's own format reward, ``docseeker_format`` (tasks/docseeker/rewards.py): the ALR headers in order and
a JSON answer dict."""

from __future__ import annotations

from reward_factory import score

DOCSEEKER_OK = (
    "<think>\n\\boxed{Question Analysis}\nThe question asks for the page.\n"
    "\\boxed{Evidence Localization}\nPage 6 holds the table.\n"
    "\\boxed{Reasoning Process}\nThe table says so.\n</think>\n"
    '<answer>\n{"evidence_pages": [6], "answer": "Page 6"}\n</answer>'
)


def test_docseeker_format_worked_examples():
    assert score("docseeker_format", DOCSEEKER_OK) == 1.0
    single_quoted = DOCSEEKER_OK.replace(
        '{"evidence_pages": [6], "answer": "Page 6"}', "{'evidence_pages': [6], 'answer': 'Page 6'}"
    )
    assert score("docseeker_format", single_quoted) == 1.0
    # missing \boxed{Reasoning Process} -> R_fmt = 0 (docs/methods/packs.md#docseeker)
    assert score("docseeker_format", DOCSEEKER_OK.replace("\\boxed{Reasoning Process}", "")) == 0.0
    # headers out of order
    swapped = DOCSEEKER_OK.replace("Evidence Localization", "TMP").replace("Reasoning Process", "Evidence Localization")
    assert score("docseeker_format", swapped.replace("TMP", "Reasoning Process")) == 0.0
    # think must *start* with \boxed{Question Analysis}
    assert score("docseeker_format", DOCSEEKER_OK.replace("<think>\n", "<think>Intro. ")) == 0.0
    # answer body must be a dict
    assert (
        score("docseeker_format", DOCSEEKER_OK.replace('{"evidence_pages": [6], "answer": "Page 6"}', "Page 6")) == 0.0
    )
