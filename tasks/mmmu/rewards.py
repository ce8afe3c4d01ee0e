"""The default rewards of the mmmu pack: MMMU's parsing and evaluation rules (``scoring.mmmu_reward``, the rule of the eval metric, scored
the same way in training); the pack has no reward of its own."""

REWARDS = [{"name": "mmreason.tasks.mmmu.scoring:mmmu_reward", "weight": 1.0}]
