"""The rewards of the ``mmlongbench_doc`` pack: DocSeeker's (``0.1 docseeker_format + 0.3 page_fbeta + 0.6 anls``,
``tasks/docseeker/rewards.py``), taken from the docseeker pack's record; the pack has no reward of its own."""

from __future__ import annotations

from mmreason.tasks.mmlongbench_doc.data import DOCSEEKER

REWARDS = DOCSEEKER.rewards
