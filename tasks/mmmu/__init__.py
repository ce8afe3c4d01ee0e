"""MMMU (and MMMU-Pro, standard and vision) as published in the Hugging Face parquet layout, scored by MMMU's
own parsing and evaluation rules (``scoring.py``), by subject, discipline, subfield and difficulty.

    mmreason eval --model M --tasks mmmu:MMMU/ --log_samples          # a folder: every subject's parquet
    mmreason eval score --tasks mmmu:MMMU/ --predictions total_val_output.json

Training on the same rows: ``task: mmmu`` with ``data.train_path`` (reward: the same rules). docs/evaluation.md.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.mmmu.data import mmmu_load
from mmreason.tasks.mmmu.rewards import REWARDS
from mmreason.tasks.mmmu.scoring import mmmu_accuracy, mmmu_breakdowns, mmmu_random_fallback

PACK = register_task(
    TaskPack(
        name="mmmu",
        description="MMMU / MMMU-Pro parquet as published, scored by MMMU's eval_utils.py rules (subject, "
        "subfield, difficulty breakdowns; seeded random fallback counted)",
        load=mmmu_load,
        rewards=REWARDS,
        metrics={"accuracy": mmmu_accuracy, "random_fallback": mmmu_random_fallback},
        higher_is_better={"random_fallback": False},
        breakdowns=mmmu_breakdowns,
        prompt_template="{question}\\nA. {option}...\\nAnswer with the option's letter from the given choices "
        "directly. (open: Answer the question using a single word or phrase.)",
    )
)
