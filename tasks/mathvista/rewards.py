"""The default rewards of the mathvista pack: MathVista's calculate_score.py rules (``scoring.mathvista_reward``, the rule of the eval metric, scored
the same way in training); the pack has no reward of its own."""

REWARDS = [{"name": "mmreason.tasks.mathvista.scoring:mathvista_reward", "weight": 1.0}]
