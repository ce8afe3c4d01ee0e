"""Which prompts a step trains on, and the within-step methods that redo some of its groups.

Samplers (``SAMPLERS``: uniform, VAS, Prompt-GDRO; ``stream.py`` for a streamed dataset) pick the dataset indices of
each step. The within-step methods (``WITHIN_STEP``: difficulty-aware augmentation, iGRPO refinement, SAGE
hints, R³ / DaGRPO anchors) each live whole in one module here, the paper's pure rules beside the pass that runs
them on a step's scored groups (``regenerate(phases, got) -> Rollouts``; ``within_step.py``). They live in this room,
not under ``rollout/``, because a pass reads and merges reward batches (``rewarding/``), which the rollout engine
never sees; like the samplers they decide what the step trains on, and the trainer calls them by one interface.
"""

from mmreason.registry import Registry
from mmreason.sampling import anchors, difficulty, hinting, refine
from mmreason.sampling.base import PromptSampler
from mmreason.sampling.gdro import GDROSampler
from mmreason.sampling.uniform import UniformSampler
from mmreason.sampling.vas import VASSampler

SAMPLERS: Registry = Registry("sampler")
SAMPLERS.add("uniform", UniformSampler, provenance="standard")
SAMPLERS.add("vas", VASSampler, provenance="equations")
SAMPLERS.add("gdro", GDROSampler, provenance="abstract only")

# Within-step methods, by the name a config gives ``within_step.name`` (``augment`` / ``refine`` / ``hint`` /
# ``anchor``); each module's ``regenerate`` is called by the step (mmreason/train/step.py); ``mmreason list
# rollouts`` lists them with their papers.
WITHIN_STEP: Registry = Registry("within-step method")
WITHIN_STEP.add("augment", difficulty, provenance="proposed")
WITHIN_STEP.add("refine", refine, provenance="abstract only")
WITHIN_STEP.add("hint", hinting, provenance="authors' code")
WITHIN_STEP.add("anchor", anchors, provenance="abstract only")
ROLLOUT_VARIANTS = WITHIN_STEP  # the registry's earlier name

__all__ = ["ROLLOUT_VARIANTS", "SAMPLERS", "WITHIN_STEP", "PromptSampler", "UniformSampler"]
