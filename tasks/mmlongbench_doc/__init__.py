"""MMLongBench-Doc as published (``data/samples.json`` beside ``data/documents/``), scored by its own rules
(``scoring.py`` on ``rewards/mmlongbench.py``): generalized accuracy, F1 and their breakdowns. The data, prompt and
rewards are DocSeeker's (``data.py``).

    mmreason eval --model M --tasks mmlongbench_doc:PATH/samples.json --log_samples

docs/tasks/mmlongbench_doc.md.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.mmlongbench_doc.data import DOCSEEKER, mmlongbench_load
from mmreason.tasks.mmlongbench_doc.rewards import REWARDS
from mmreason.tasks.mmlongbench_doc.scoring import DERIVED, RESULTS_NOTE, mmlongbench_metrics

PACK = register_task(
    TaskPack(
        name="mmlongbench_doc",
        description="MMLongBench-Doc's samples.json as published, scored by its rules (accuracy, F1, breakdowns); "
        "DocSeeker's prompt and rewards",
        load=mmlongbench_load,
        rewards=REWARDS,
        metrics=mmlongbench_metrics(),
        derived=DERIVED,
        results_note=RESULTS_NOTE,
        prompt_template=DOCSEEKER.prompt_template,
        sft_target=DOCSEEKER.sft_target,
        transform=DOCSEEKER.transform,
    )
)
