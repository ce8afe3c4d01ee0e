"""Rollout backends: what samples a step's completions (docs/vllm.md).

A backend takes the prompt records the prompt builder made (``PromptInputs``: token ids with visual
placeholders expanded, media already budgeted and decoded) and per-group seeds, and returns trajectories
with the sampled tokens and, where it has them, their log-probs. It never re-tokenizes a prompt or
re-decodes media: the trainer scores exactly what it sampled. Weight sync is the backend's business; the
trainer calls ``sync_weights(model)`` after each optimizer step.

    hf    HF ``generate`` in the training process (``rollout/generate.py``); nothing to sync.
    vllm  a vLLM engine (``vllm_engine.py``): colocated in the training job, or a ``mmreason vllm-serve``
          server on this machine.
"""

from __future__ import annotations

BACKENDS = ("hf", "vllm")


class EngineDied(RuntimeError):
    """A rollout engine stopped answering mid-run (the trainer saves the last finished step and stops)."""


class EngineDiedAfterUpdate(EngineDied):
    """The engine died, or did not answer in time, while taking the weights of a step whose optimizer update
    had finished: the trainer saves that step as itself (its weights and state are complete), never under the
    previous step's number."""
