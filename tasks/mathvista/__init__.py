"""MathVista as published (``testmini.json`` / ``test.json`` or the Hugging Face parquet), scored by its own
rules (``scoring.py``: ``calculate_score.py``'s normalization, exact match, its breakdowns).

    mmreason eval --model M --tasks mathvista:MathVista/data/testmini.json --log_samples
    mmreason eval score --tasks mathvista:MathVista/data/testmini.json --predictions output_gpt4.json

Training on the same rows: ``task: mathvista`` with ``data.train_path`` (reward: the same rules). docs/evaluation.md.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.mathvista.data import mathvista_load
from mmreason.tasks.mathvista.rewards import REWARDS
from mmreason.tasks.mathvista.scoring import mathvista_accuracy, mathvista_breakdowns, parsed_answer

PACK = register_task(
    TaskPack(
        name="mathvista",
        description="MathVista's testmini.json / test.json or HF parquet as published, scored by its "
        "calculate_score.py rules (accuracy and its breakdowns)",
        load=mathvista_load,
        rewards=REWARDS,
        metrics={"accuracy": mathvista_accuracy},
        breakdowns=mathvista_breakdowns,
        prompt_template="the row's query (or build_query.py's zero-shot query)",
        extract_answer=parsed_answer,
    )
)
