"""The default rewards of the chartqa pack: ChartQA's relaxed accuracy (``scoring.chartqa_reward``, the rule of the eval metric, scored
the same way in training); the pack has no reward of its own."""

REWARDS = [{"name": "mmreason.tasks.chartqa.scoring:chartqa_reward", "weight": 1.0}]
