"""Prompt samplers: uniform now; variance-aware (VAS) and difficulty-aware samplers plug in here."""

from mmreason.registry import Registry
from mmreason.sampling.base import PromptSampler
from mmreason.sampling.uniform import UniformSampler
from mmreason.sampling.vas import VASSampler

SAMPLERS: Registry = Registry("sampler")
SAMPLERS.add("uniform", UniformSampler)
SAMPLERS.add("vas", VASSampler)

__all__ = ["SAMPLERS", "PromptSampler", "UniformSampler"]
