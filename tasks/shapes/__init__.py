"""Shapes: the quickstart pack — one shape per image in one of four colours, "what colour is it?".

Small, bundled (generated deterministically on first use, no download) and learnable by the tiny
model within CPU minutes: a short SFT warm-up, then GRPO with an exact-match reward; the in-training
eval on held-out images shows the accuracy.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.shapes.data import shapes_load
from mmreason.tasks.shapes.rewards import REWARDS
from mmreason.tasks.shapes.scoring import shapes_metric_accuracy

PACK = register_task(
    TaskPack(
        name="shapes",
        description="quickstart: colour of one synthetic shape per image (bundled, generated locally)",
        load=shapes_load,
        rewards=REWARDS,
        metrics={"accuracy": shapes_metric_accuracy},
        prompt_template="What colour is the shape? Answer with one word.",
    )
)
