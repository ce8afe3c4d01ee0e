"""The update's log-probs from the LM head's hidden states, chunk by chunk (``chunked``), equal the logits
path on the tiny model: values, entropies and every parameter's gradient, plain and shared-prefix passes."""

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


def _run(fn, model, mask):
    model.zero_grad(set_to_none=True)
    lp, ent = fn()
    ((lp * mask).sum() + 0.3 * (ent * mask).sum()).backward()
    return lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("path", ["plain", "shared prefix"])
def test_chunked_head_equals_the_logits_path(trainable, tiny, one_torch_thread, path):
    model, processor = trainable, tiny[1]
    trajs = _groups(model, processor)
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    suppressed = [processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")]

    def logprobs(chunked):
        if path == "plain":
            return lambda: token_logprobs(
                model, batch, True, temperature=TEMPERATURE, suppressed=suppressed, chunked=chunked, entropy_grad=True
            )
        return lambda: shared_prefix.shared_prefix_logprobs(
            model,
            trajs,
            batch.input_ids.shape[1],
            processor.tokenizer.pad_token_id,
            True,
            temperature=TEMPERATURE,
            suppressed=suppressed,
            chunked=chunked,
            entropy_grad=True,
        )

    mask = batch.action_mask
    want_lp, want_ent, want_grads = _run(logprobs(False), model, mask)
    lp, ent, grads = _run(logprobs(True), model, mask)
    assert mask.sum() > 10 and (want_lp * mask).abs().sum() > 0
    torch.testing.assert_close(lp, want_lp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ent, want_ent, atol=1e-5, rtol=1e-5)
    assert grads.keys() == want_grads.keys() and "lm_head.weight" in grads
    for name, g in grads.items():
        torch.testing.assert_close(g, want_grads[name], atol=1e-5, rtol=1e-4, msg=name)
