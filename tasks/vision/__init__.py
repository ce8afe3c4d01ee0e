"""Vision: multi-domain visual QA (perception, chart, reasoning) for G²RPO, VAS and TON recipes.

Data: easy-VQA converted on the fly from the installed ``easy-vqa`` package (real images, yes/no and
colour / shape answers) and generated counting, colour, chart-reading and geometry items with numeric
answers (``data.py``). Each sample carries its ``domain`` (the trainer's ``algorithm.task_key``: G²RPO
task sets, per-domain entropy bands and metrics), its ``answer_type`` and a per-domain ``length_profile``
for the ``length_trapezoid`` reward. ``answer_format: think`` with ``thought_dropout: 0.5`` gives TON's
SFT data. Reward ``mmreason.tasks.vision.scoring:vision_accuracy``; eval metrics: accuracy (overall and
per domain), skip_think (TON's skip-think ratio), think_format. The pack's own reward ``skip_think``
(``rewards.py``) logs that ratio during training.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.vision.baseline import baseline_rule
from mmreason.tasks.vision.data import vision_load
from mmreason.tasks.vision.rewards import REWARDS
from mmreason.tasks.vision.scoring import METRICS

PACK = register_task(
    TaskPack(
        name="vision",
        description="multi-domain visual QA: easy-VQA (installed package) + synthetic counting/colour/chart/geometry",
        load=vision_load,
        rewards=REWARDS,
        metrics=dict(METRICS),
        prompt_template="{question}\\n{instruction by answer_format: plain | think}",
        task_key="domain",
        baseline=baseline_rule,
    )
)
