"""Each method's trainer side sits beside the method behind one provider interface (rl/providers.py): the run
builds the providers of the fields its loss reads, they give each mini-batch's fields, and what they keep
between steps goes into the checkpoint's trainer state under the keys earlier checkpoints used."""

from __future__ import annotations

import dataclasses

import torch

from mmreason import rl
from mmreason.rl.losses.dcpo import DCPOInputs
from mmreason.rl.losses.gepo import EntropyHistory
from mmreason.rl.providers import PreviousEntropy
from mmreason.train.loss_extras import LossExtras
from mmreason.train.setup import Run
from mmreason.train.vps import SegmentProgress


class View:
    """Two mini-batches whose behaviour log-probs are -1 per token, divided by the temperature asked."""

    count = 2

    def logprobs(self, k: int, *, temperature: float | None = None) -> torch.Tensor:
        return torch.full((1, 3), -1.0 / (temperature or 1.0))


def _kinds(loss: str) -> list[type]:
    return [type(p) for p in LossExtras.for_loss(loss, {}).providers]


def test_the_run_builds_the_providers_of_the_fields_its_loss_reads():
    assert _kinds("clipped") == []
    assert _kinds("dcpo") == [DCPOInputs]  # it gives prev_entropy too: no second provider of it
    assert _kinds("gepo") == [EntropyHistory]
    assert _kinds("vps") == [SegmentProgress]
    # the run keeps them in one place: no method's field on Run, no hook on a loss function
    names = {f.name for f in dataclasses.fields(Run)}
    assert {"prev_entropy", "entropy_history"}.isdisjoint(names) and "loss_extras" in names
    assert not hasattr(rl.POLICY_LOSSES.get("dcpo"), "tempered_temperature")


def test_dcpo_tempers_by_the_last_entropy_and_keeps_it_in_the_checkpoint_state():
    extras = LossExtras([DCPOInputs({"entropy_base": 0.5})])
    assert extras.before_update(View()) == {"update/tempered_temperature": 1.2}  # H = 0 <= 0.5: T' = 1.2
    torch.testing.assert_close(extras.inputs(1)["tempered_logprobs"], torch.full((1, 3), -1.0 / 1.2))
    assert extras.inputs(0)["prev_entropy"] == 0.0
    extras.after_update(0.9)
    assert extras.state_dict() == {"prev_entropy": 0.9}
    resumed = LossExtras([DCPOInputs({"entropy_base": 0.5})])
    resumed.load_state_dict({"prev_entropy": 0.9, "sampler": {}})  # the trainer state of a checkpoint
    assert resumed.before_update(View()) == {"update/tempered_temperature": 0.8}  # H = 0.9 > 0.5: T' = 0.8
    skipped = PreviousEntropy()
    skipped.after_update(None)  # an update without an entropy (skipped) leaves H as it was
    assert skipped.prev_entropy == 0.0


def test_gepo_keeps_the_first_pass_group_entropies_of_finished_updates():
    history = EntropyHistory()
    history.before_update(View())
    entropy = torch.tensor([[1.0, 3.0, 9.0], [2.0, 2.0, 2.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    history.after_minibatch(0, entropy, mask, torch.tensor([7, 7, 8]))
    assert history.inputs(0)["entropy_history"].numel() == 0  # this step's values join after the update
    history.after_update(None)
    # group 7: rows' mean token entropies 2 and 2 -> 2; group 8: 4
    assert history.state_dict() == {"entropy_history": [2.0, 4.0]}
    again = EntropyHistory()
    again.load_state_dict({"entropy_history": [2.0, 4.0]})
    torch.testing.assert_close(again.inputs(3)["entropy_history"], torch.tensor([2.0, 4.0]))
