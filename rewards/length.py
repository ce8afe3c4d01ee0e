"""Length shaping: OpenVLThinkerV2's response-length trapezoid and DAPO's overlong penalty.

Both count the trajectory's generated tokens, ``Trajectory.completion_length`` (the tokens with
``action_mask`` 1: every assistant turn, never the prompt or tool observations).
"""

from __future__ import annotations

from mmreason.rewarding import column, per_sample, reward

# (L_min, L_low, L_high, L_max) in tokens, [proposed] in docs/methods/trainer.md#length-trapezoid.
LENGTH_PROFILES: dict[str, tuple[int, int, int, int]] = {
    "perception": (1, 8, 256, 1024),
    "reasoning": (64, 512, 3072, 4096),
    "hybrid": (16, 128, 1536, 3072),
}


def trapezoid(length: float, l_min: float, l_low: float, l_high: float, l_max: float) -> float:
    """R_len: 0 outside [L_min, L_max], rising linearly on [L_min, L_low), 1 on [L_low, L_high],
    falling linearly on (L_high, L_max]. Source: OpenVLThinkerV2 (arXiv 2604.08539) section 2.3.

    A zero-width ramp (L_min == L_low or L_high == L_max) is a step.
    """
    if not l_min <= l_low <= l_high <= l_max:
        raise ValueError(
            f"length thresholds must satisfy L_min <= L_low <= L_high <= L_max, got {(l_min, l_low, l_high, l_max)}"
        )
    if length < l_min or length > l_max:
        return 0.0
    if length < l_low:
        return (length - l_min) / (l_low - l_min)
    if length <= l_high:
        return 1.0
    return (l_max - length) / (l_max - l_high)


def _thresholds(profile: str | tuple | list) -> tuple[float, float, float, float]:
    if isinstance(profile, str):
        if profile not in LENGTH_PROFILES:
            raise ValueError(f"unknown length profile {profile!r}; valid: {', '.join(LENGTH_PROFILES)}")
        return LENGTH_PROFILES[profile]
    if len(profile) != 4:
        raise ValueError(f"length thresholds are (L_min, L_low, L_high, L_max), got {profile!r}")
    return tuple(float(x) for x in profile)  # type: ignore[return-value]


@reward("length_trapezoid")
@per_sample
def length_trapezoid(sample, trajectory, *, profile: str | list = "reasoning", by_task: dict | None = None):
    """Response-length trapezoid R_len (OpenVLThinkerV2): 1 inside [L_low, L_high], ramps to 0 at L_min/L_max.

    kwargs: ``profile``: "perception" (1, 8, 256, 1024), "reasoning" (64, 512, 3072, 4096), "hybrid"
    (16, 128, 1536, 3072) or explicit [L_min, L_low, L_high, L_max] tokens; ``by_task``: {task name:
    profile} overriding ``profile`` per ``Sample.task``. Column ``length_profile`` (optional) overrides both.
    """
    chosen = column(sample, "length_profile") or (by_task or {}).get(sample.task) or profile
    return trapezoid(trajectory.completion_length, *_thresholds(chosen))


def overlong(length: float, max_length: float, cache: float) -> float:
    """DAPO's soft overlong penalty: 0 up to L_max - L_cache, then linear down to -1 at L_max, -1 beyond.

        R = 0                              if |y| <= L_max - L_cache
        R = ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
        R = -1                             if |y| > L_max
    Source: DAPO (arXiv 2503.14476), "Soft Overlong Punishment"; docs/methods/trainer.md#dapo.
    """
    if cache <= 0 or cache > max_length:
        raise ValueError(f"need 0 < L_cache <= L_max, got L_cache={cache}, L_max={max_length}")
    expected = max_length - cache
    if length <= expected:
        return 0.0
    if length <= max_length:
        return (expected - length) / cache
    return -1.0


@reward("overlong_penalty")
@per_sample
def overlong_penalty(sample, trajectory, *, max_length: int = 20480, cache: int = 4096):
    """DAPO overlong penalty: 0 below L_max - L_cache, linear to -1 at L_max (defaults 20480 / 4096 tokens).

    Add it with weight 1 next to the task reward. (DAPO's alternative, masking truncated samples out of
    the loss, is a trainer option: ``Trajectory.truncated`` marks them.)
    """
    return overlong(trajectory.completion_length, max_length, cache)
