"""Video-MME as published (the annotation parquet, videos as ``{videoID}.mp4``, subtitles as ``{videoID}.srt``),
scored by its option-letter rule, by duration, domain, sub-category and task type (``scoring.py``).

    mmreason eval --model M --tasks videomme:Video-MME/videomme/test-00000-of-00001.parquet \\
        --task_args video_dir=Video-MME/data,subtitles=true --log_samples
    mmreason eval score --tasks videomme:test-00000-of-00001.parquet --predictions samples.jsonl

Training on the same rows: ``task: videomme`` with ``data.train_path`` (reward: the same rule). docs/evaluation.md.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.videomme.data import videomme_load
from mmreason.tasks.videomme.rewards import REWARDS
from mmreason.tasks.videomme.scoring import parsed_answer, videomme_accuracy, videomme_breakdowns

PACK = register_task(
    TaskPack(
        name="videomme",
        description="Video-MME annotation as published (videos, .srt subtitles), option-letter accuracy by "
        "duration, domain, task type",
        load=videomme_load,
        rewards=REWARDS,
        metrics={"accuracy": videomme_accuracy},
        breakdowns=videomme_breakdowns,
        prompt_template="[subtitles] Select the best answer ... \\n{question}\\n{options}\\nThe best answer is:",
        extract_answer=parsed_answer,
    )
)
