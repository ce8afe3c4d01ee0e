"""The reward plug-in API: register, resolve and run reward functions.

Write a reward (see the README, "Writing a reward")::

    from mmreason.rewarding import reward

    @reward("mentions_answer")
    def mentions_answer(samples, trajectories, **kwargs):
        \"\"\"1 if the completion contains the reference answer.\"\"\"
        return [float(str(s.answer) in t.completion_text) for s, t in zip(samples, trajectories)]

and reference it from a config by name, as ``my_pkg.rewards:mentions_answer`` or as
``path/to/file.py:mentions_answer``. TRL-style functions ``(prompts, completions, **columns)`` work unchanged.
The trainer builds a ``RewardRunner`` from ``RewardSpec``s and gets a ``RewardBatch`` per step.
"""

from mmreason.rewarding.calling import RewardConfigError, RewardOutputError
from mmreason.rewarding.helpers import column, per_sample
from mmreason.rewarding.isolation import RewardTimeout
from mmreason.rewarding.records import ErrorRecord, RewardBatch, RewardErrorLimitExceeded, RewardSpec
from mmreason.rewarding.registry import REWARDS, RewardInfo, list_rewards, reward, reward_info
from mmreason.rewarding.resolve import resolve_reward
from mmreason.rewarding.runner import RewardRunner

__all__ = [
    "REWARDS",
    "ErrorRecord",
    "RewardBatch",
    "RewardConfigError",
    "RewardErrorLimitExceeded",
    "RewardInfo",
    "RewardOutputError",
    "RewardRunner",
    "RewardSpec",
    "RewardTimeout",
    "column",
    "list_rewards",
    "per_sample",
    "resolve_reward",
    "reward",
    "reward_info",
]
