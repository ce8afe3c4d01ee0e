"""The default rewards of the docvqa pack: ANLS at the 0.5 threshold (``scoring.docvqa_reward``, the rule of the eval metric, scored
the same way in training); the pack has no reward of its own."""

REWARDS = [{"name": "mmreason.tasks.docvqa.scoring:docvqa_reward", "weight": 1.0}]
