"""The data of the ``mmlongbench_doc`` pack: MMLongBench-Doc's ``samples.json`` as published (or rows in DocSeeker's
shape), read by the docseeker pack's loader: the same PDFs, page images, page retrieval and EGRA page budgets
(``tasks/docseeker/data.py``, ``tasks/docseeker/mmlongbench.py``), and DocSeeker's prompt.

Packs never import each other (tests/test_layering.py), so this pack takes docseeker's record from the task
registry. The registry imports the pack folders in sorted order, docseeker before this one; importing this module
first loads the registry, which registers docseeker.
"""

from __future__ import annotations

from mmreason.taskpack import TASKS, TaskPack

DOCSEEKER: TaskPack = TASKS.get("docseeker")
mmlongbench_load = DOCSEEKER.load
