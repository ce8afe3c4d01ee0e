"""The ``health:`` section of a train config: each alarm's thresholds and its off switch.

Defaults are calibrated on two real runs (docs/health.md): the README's main job (shapes, SFT then GRPO
with an exact-match reward; held-out accuracy 0.72 -> 1.00) raises none, and the same quickstart from the
untrained model with ANLS at threshold 0 (a reward one fragment can earn without looking) raises reward
hacking and answer collapse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass
class RewardHacking:
    """A training reward (total or one component) rises over ``window`` steps while no held-out metric of
    the in-training eval rises (a metric at ``ceiling`` or above counts as risen: it cannot rise)."""

    enabled: bool = True
    window: int = 30  # steps
    min_reward_rise: float = 0.01  # least-squares rise of the training reward over the window ...
    min_z: float = 3.0  # ... and that many standard errors of the fitted slope (not noise)
    min_eval_rise: float = 0.02  # last minus first held-out value in the window (eval rows from window start)
    ceiling: float = 0.95
    eval_steps: int = 10  # the in-training eval's period when the config leaves eval_steps unset ...
    eval_limit: int = 64  # ... and its docs when eval_limit is unset too

    RANGES: ClassVar[dict[str, str]] = {
        "window": "[2, inf)",
        "min_reward_rise": "[0, inf)",
        "min_z": "[0, inf)",
        "min_eval_rise": "[0, inf)",
        "ceiling": "[0, inf)",
        "eval_steps": "[1, inf)",
        "eval_limit": "[1, inf)",
    }


@dataclass
class AnswerCollapse:
    """Most completions of a step give one parsed final answer although the groups' gold answers differ."""

    enabled: bool = True
    min_share: float = 0.8  # the most common answer's share of the step's completions
    min_excess: float = 0.3  # ... above the most common gold answer's share
    steps: int = 3  # consecutive steps

    RANGES: ClassVar[dict[str, str]] = {"min_share": "[0, 1]", "min_excess": "[0, 1]", "steps": "[1, inf)"}


@dataclass
class EntropyCollapse:
    """Token entropy falls below ``min_ratio`` of its mean over the first ``baseline_steps`` steps."""

    enabled: bool = True
    min_ratio: float = 0.1
    baseline_steps: int = 5
    steps: int = 5

    RANGES: ClassVar[dict[str, str]] = {"min_ratio": "[0, 1]", "baseline_steps": "[1, inf)", "steps": "[1, inf)"}


@dataclass
class KLBlowup:
    """KL to the reference above ``max_kl``, or above ``min_kl`` and ``spike_ratio`` x its recent median."""

    enabled: bool = True
    max_kl: float = 1.0
    min_kl: float = 0.05
    spike_ratio: float = 10.0
    window: int = 20

    RANGES: ClassVar[dict[str, str]] = {
        "max_kl": "(0, inf)",
        "min_kl": "[0, inf)",
        "spike_ratio": "[1, inf)",
        "window": "[1, inf)",
    }


@dataclass
class NoSignal:
    """The share of groups whose rewards are all equal (no advantage, no gradient) stays high."""

    enabled: bool = True
    max_share: float = 0.9
    steps: int = 10

    RANGES: ClassVar[dict[str, str]] = {"max_share": "[0, 1]", "steps": "[1, inf)"}


@dataclass
class Truncated:
    """Completions cut at max_completion_length (or episodes cut by a limit) above a share."""

    enabled: bool = True
    max_share: float = 0.5
    steps: int = 5

    RANGES: ClassVar[dict[str, str]] = {"max_share": "[0, 1]", "steps": "[1, inf)"}


@dataclass
class LogprobMismatch:
    """Sampler and trainer log-probs of the same tokens disagree (``mismatch/logprob_abs_diff_mean``: mean
    |diff|, logged when the rollout backend reports its log-probs, i.e. vLLM)."""

    enabled: bool = True
    max_mean_abs: float = 0.1
    steps: int = 3

    RANGES: ClassVar[dict[str, str]] = {"max_mean_abs": "[0, inf)", "steps": "[1, inf)"}


@dataclass
class HealthConfig:
    enabled: bool = True  # false: no alarm is checked
    reward_hacking: RewardHacking = field(default_factory=RewardHacking)
    answer_collapse: AnswerCollapse = field(default_factory=AnswerCollapse)
    entropy_collapse: EntropyCollapse = field(default_factory=EntropyCollapse)
    kl_blowup: KLBlowup = field(default_factory=KLBlowup)
    no_signal: NoSignal = field(default_factory=NoSignal)
    truncated: Truncated = field(default_factory=Truncated)
    logprob_mismatch: LogprobMismatch = field(default_factory=LogprobMismatch)
