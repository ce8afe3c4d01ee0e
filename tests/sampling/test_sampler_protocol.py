"""Every sampler answers all that the step asks of it (``sampling/base.py``): the step calls ``observe`` with the
completions, ``generations`` for group sizes and ``refresh_due`` before each step on whichever sampler the run
has, instead of probing for them (``getattr``, ``inspect.signature``)."""

from __future__ import annotations

import torch

from mmreason.sampling import SAMPLERS, PromptSampler
from mmreason.sampling.base import BaseSampler


def _samplers():
    return {name: SAMPLERS.get(name)(6, seed=0) for name in SAMPLERS.names()}


def test_every_registered_sampler_declares_the_whole_interface():
    for name, sampler in _samplers().items():
        assert isinstance(sampler, PromptSampler), name
        assert isinstance(sampler, BaseSampler), name
        drawn = sampler.next_indices(2)
        # the step's call, the same for every sampler: completions by keyword
        sampler.observe(drawn, torch.tensor([1.0, 0.0]), torch.tensor(drawn), completions=["a", "b"])
        assert sampler.refresh_due(1) is False, name  # none of them refreshes in its default mode
        assert sampler.generations(drawn, 4) is None, name  # nor sizes groups
        assert sampler.sizes_groups is False, name


def test_the_samplers_that_adapt_say_so_through_the_same_interface():
    vas = SAMPLERS.get("vas")(6, seed=0, mode="rollouts", update_every=2)
    assert [vas.refresh_due(step) for step in (1, 2, 3)] == [True, False, True]
    gdro = SAMPLERS.get("gdro")(6, seed=0, rollout_allocation=True)
    assert gdro.sizes_groups is True
    counts = gdro.generations([0, 1, 2], 4)
    assert counts is not None and sum(counts) == 12  # the budget: 4 rollouts a prompt on average
