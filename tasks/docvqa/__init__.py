"""DocVQA and InfographicVQA as published (the RRC JSON with its images, or the lmms-lab parquet), scored by
ANLS at the 0.5 threshold (``scoring.py``).

    mmreason eval --model M --tasks docvqa:DocVQA/val/val_v1.0.json --log_samples
    mmreason eval score --tasks docvqa:DocVQA/val/val_v1.0.json --predictions answers.json

Training on the same rows: ``task: docvqa`` with ``data.train_path`` (reward: the same ANLS). docs/evaluation.md.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.docvqa.data import INSTRUCTION, docvqa_load
from mmreason.tasks.docvqa.rewards import REWARDS
from mmreason.tasks.docvqa.scoring import docvqa_anls_metric, docvqa_breakdowns

PACK = register_task(
    TaskPack(
        name="docvqa",
        description="DocVQA / InfographicVQA JSON or lmms-lab parquet as published, ANLS (0.5) with breakdowns",
        load=docvqa_load,
        rewards=REWARDS,
        metrics={"anls": docvqa_anls_metric},
        breakdowns=docvqa_breakdowns,
        prompt_template="{question}\\n" + INSTRUCTION,
    )
)
