"""``rollout.vllm_enable_sleep_mode``: the colocated engine gives its GPU memory back while the trainer updates
(docs/vllm.md, "Sleep mode"), in the order TRL and verl use:

    generate (KV cache woken first) -> sleep -> optimizer update -> weights woken -> push -> generate ...

The trainer puts the engine to sleep once a step's rollouts are done (``train/rollout_backend.rest_engine``);
the engine wakes its weights itself before a push and its KV cache before a generate call. Level 2 (weights
and KV cache dropped) when every wake of the weights is followed by a full push; level 1 (weights kept in CPU
memory) when a push loads only a LoRA adapter onto them. Only vLLM's GPU builds sleep: on CPU the setting is
refused before the engine is built.
"""

from __future__ import annotations

from typing import Any


class EngineSleep:
    """The engine's sleep state and the calls that change it (``llm``: the ``vllm.LLM``). Disabled, every
    method is a no-op."""

    def __init__(self, llm: Any, *, enabled: bool, keeps_base: bool = False) -> None:
        self.llm = llm
        self.enabled = enabled
        self.level = 1 if keeps_base else 2
        self.weights_awake = True
        self.cache_awake = True

    def after_generation(self) -> None:
        """Put the engine to sleep: the step's generation is over and the update needs the memory."""
        if self.enabled and (self.weights_awake or self.cache_awake):
            self.llm.sleep(level=self.level)
            self.weights_awake = self.cache_awake = False

    def before_push(self) -> None:
        """Wake the weights (not the KV cache) so the push writes into mapped memory."""
        if self.enabled and not self.weights_awake:
            self.llm.wake_up(tags=["weights"])
            self.weights_awake = True

    def before_generation(self) -> None:
        """Wake what generation needs: the KV cache, and at level 1 the kept weights. At level 2 weights that
        were dropped and never pushed again are an error, never a silent sample of garbage."""
        if not self.enabled:
            return
        if not self.weights_awake:
            if self.level == 2:
                raise RuntimeError(
                    "vLLM sleep mode: generation after a sleep with no weight push since (the weights were dropped)"
                )
            self.llm.wake_up(tags=["weights"])
            self.weights_awake = True
        if not self.cache_awake:
            self.llm.wake_up(tags=["kv_cache"])
            self.cache_awake = True
