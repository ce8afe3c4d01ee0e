"""ChartQA as published (the repository's ``test/`` JSON and ``png/``, or the Hugging Face parquet), scored by
relaxed accuracy overall and per split (``scoring.py``).

    mmreason eval --model M --tasks chartqa:ChartQA/test --log_samples
    mmreason eval score --tasks chartqa:ChartQA/test --predictions answers.jsonl

Training on the same rows: ``task: chartqa`` with ``data.train_path`` (reward: relaxed accuracy). docs/evaluation.md.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.chartqa.data import INSTRUCTION, chartqa_load
from mmreason.tasks.chartqa.rewards import REWARDS
from mmreason.tasks.chartqa.scoring import chartqa_breakdowns, chartqa_relaxed_accuracy

PACK = register_task(
    TaskPack(
        name="chartqa",
        description="ChartQA's test JSON / png or HF parquet as published, relaxed accuracy (5 %) by split",
        load=chartqa_load,
        rewards=REWARDS,
        metrics={"relaxed_accuracy": chartqa_relaxed_accuracy},
        breakdowns=chartqa_breakdowns,
        prompt_template="{query}\\n" + INSTRUCTION,
    )
)
