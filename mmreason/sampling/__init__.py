"""Prompt samplers, registered by name: ``uniform``, ``vas`` (variance-aware) and ``gdro`` (Prompt-GDRO); and the
within-step regenerations a config turns on (``ROLLOUT_VARIANTS``: ``augment``, ``refine``, ``hint``, ``anchor``)."""

from mmreason.registry import Registry
from mmreason.sampling import anchors, difficulty, hinting, refine
from mmreason.sampling.base import PromptSampler
from mmreason.sampling.gdro import GDROSampler
from mmreason.sampling.uniform import UniformSampler
from mmreason.sampling.vas import VASSampler

SAMPLERS: Registry = Registry("sampler")
SAMPLERS.add("uniform", UniformSampler)
SAMPLERS.add("vas", VASSampler)
SAMPLERS.add("gdro", GDROSampler)

# Within-step regenerations a config turns on by its block name (``augment`` / ``refine`` / ``hint`` / ``anchor``: at most
# one); listed by ``mmreason list rollouts`` with their papers. The step-side code is in mmreason/train/.
ROLLOUT_VARIANTS: Registry = Registry("rollout variant")
ROLLOUT_VARIANTS.add("augment", difficulty)
ROLLOUT_VARIANTS.add("refine", refine)
ROLLOUT_VARIANTS.add("hint", hinting)
ROLLOUT_VARIANTS.add("anchor", anchors)

__all__ = ["ROLLOUT_VARIANTS", "SAMPLERS", "PromptSampler", "UniformSampler"]
