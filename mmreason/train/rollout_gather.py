"""Whether the rollout phase gathers a sharded policy whole (``parallel.sharding.gathered``).

HF generation runs many forwards whose number differs between processes, so a sharded (FSDP2) policy is
gathered whole for it, once. A vLLM engine generates from its own copy of the weights: the policy runs no
forward while it does, and gathering it would only hold a whole unsharded copy of the policy on every device
through the rollout phase. SAGE hints (``hint.enabled``) are written with HF generation whatever the engine.
"""

from __future__ import annotations

from typing import Any


def rollouts_run_policy(run: Any) -> bool:
    """Tell whether the step's rollout phase runs the policy's own forwards (HF generation, SAGE hints)."""
    return run.rollout_backend is None or bool(run.cfg.hint.enabled)
