"""Shapes: the quickstart pack — one coloured shape per image, "what colour is it?".

Small, bundled (generated deterministically on first use, no download) and learnable by the tiny
model within CPU minutes, so the README's first command shows a real reward curve going up.
"""

from mmreason.taskpack import TaskPack, register_task
from mmreason.tasks.shapes.data import shapes_load, shapes_metric_accuracy

PACK = register_task(
    TaskPack(
        name="shapes",
        description="quickstart: colour of one synthetic shape per image (bundled, generated locally)",
        load=shapes_load,
        rewards=[{"name": "anls", "weight": 1.0},
                 {"name": "length_trapezoid", "weight": 0.5, "kwargs": {"profile": [0, 1, 2, 6]}}],
        metrics={"accuracy": shapes_metric_accuracy},
        prompt_template="What colour is the shape? Answer with one word.",
    )
)
