"""The entropy the update logs carries no autograd graph unless a loss differentiates it (the entropy band):
on the logits path (a LoRA or FSDP-sharded head) that graph keeps [M, V] fp32 tensors, the largest of the
update at a 151k vocabulary (issue 48)."""

from __future__ import annotations

import pytest
import torch

from mmreason.models import ModelConfig, load_model
from mmreason.rollout import shared_prefix
from mmreason.rollout.forward import collate, token_logprobs
from tests.rollout.test_shared_prefix import TEMPERATURE, _groups


@pytest.fixture(scope="module")
def trainable(tiny_model_dir):
    return load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"))


def _saved_bytes(fn):
    """(what ``fn`` returns, the bytes autograd saved for backward while it ran)."""
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, saved[0]


@pytest.mark.parametrize("path", ["plain", "shared prefix"])
def test_entropy_keeps_no_graph_unless_asked(trainable, tiny, one_torch_thread, path):
    model, processor = trainable, tiny[1]
    trajs = _groups(model, processor)
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    options = dict(temperature=TEMPERATURE, chunked=False)  # the logits path: a head that cannot be chunked

    def run(with_entropy, **extra):
        if path == "plain":
            return lambda: token_logprobs(model, batch, with_entropy, **options, **extra)
        pad = processor.tokenizer.pad_token_id
        width = batch.input_ids.shape[1]
        return lambda: shared_prefix.shared_prefix_logprobs(model, trajs, width, pad, with_entropy, **options, **extra)

    (lp_only, _), without = _saved_bytes(run(False))
    (lp, ent), logged = _saved_bytes(run(True))
    (_, ent_grad), shaped = _saved_bytes(run(True, entropy_grad=True))
    assert not ent.requires_grad and ent_grad.requires_grad and lp.requires_grad
    assert logged == without  # the logged entropy adds nothing to what backward keeps
    vocab = model.get_output_embeddings().weight.shape[0]
    assert shaped - without >= batch.action_mask.sum() * vocab * 4  # at least one [M, V] fp32 tensor more
    torch.testing.assert_close(ent, ent_grad.detach())
    torch.testing.assert_close(lp, lp_only)
