"""Generic: any image / video QA dataset in the formats the field uses (EasyR1, TRL, verl, Video-R1, LLaVA /
ShareGPT), from JSON Lines, JSON, parquet, a ``save_to_disk`` folder or an imagefolder, with no conversion.

The format is detected from the columns (``data.task_args.format`` forces one, ``columns`` renames), each row's
answer picks its scoring rule (``answers.py``), ``prompt_template`` asks for an answer format (``templates.py``).
Rewards: ``generic_accuracy`` and ``generic_format`` (0.1, as EasyR1's recipes weigh theirs); eval metrics: the
same rules. ``mmreason data inspect PATH`` shows what the pack reads. More formats: ``formats.register_format``.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.generic.data import generic_load
from mmreason.tasks.generic.rewards import REWARDS
from mmreason.tasks.generic.scoring import metric_accuracy, metric_format

PACK = register_task(
    TaskPack(
        name="generic",
        description="your image / video QA data as it is: EasyR1, TRL, verl, Video-R1 or ShareGPT rows "
        "(jsonl / json / parquet / save_to_disk / imagefolder)",
        load=generic_load,
        rewards=REWARDS,
        metrics={"accuracy": metric_accuracy, "format": metric_format},
        prompt_template="{row's user text} through data.task_args.prompt_template (plain | think_boxed | "
        "think_answer | FILE.jinja)",
        results_note="answers scored by each row's answer kind: mcq letter / number / math-verify / exact / ANLS",
    )
)
