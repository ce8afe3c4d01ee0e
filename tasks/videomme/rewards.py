"""The default rewards of the videomme pack: Video-MME's option-letter rule (``scoring.videomme_reward``, the rule of the eval metric, scored
the same way in training); the pack has no reward of its own."""

REWARDS = [{"name": "mmreason.tasks.videomme.scoring:videomme_reward", "weight": 1.0}]
