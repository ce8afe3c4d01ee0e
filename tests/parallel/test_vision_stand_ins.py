"""Vision stand-ins: a mini-batch that lacks a vision call another process makes carries a tiny row of that kind
whose forward and backward reach the vision tower and change nothing else (rollout/stand_ins.py,
train/vision_calls.py)."""

from __future__ import annotations

import pytest
import torch

from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.stand_ins import calls, stand_in
from mmreason.types import Trajectory


def _text_row(tokenizer) -> Trajectory:
    ids = torch.tensor(tokenizer("what is two plus two? four")["input_ids"])
    mask = torch.zeros_like(ids)
    mask[-3:] = 1
    return Trajectory("t", 0, ids, mask, int(ids.numel()) - 3, "four")


def test_each_kind_makes_its_call(tiny):
    _, processor = tiny
    image, video = stand_in(processor, "image"), stand_in(processor, "video")
    assert calls([image]) == {"image"} and calls([video]) == {"video"} and calls([image, video]) == {"image", "video"}
    assert calls([_text_row(processor.tokenizer)]) == set()
    assert int(image.action_mask.sum()) == 1 and int(video.action_mask.sum()) == 1


def test_a_stand_in_changes_no_log_prob_and_gives_the_tower_a_zero_gradient(tiny_model_dir):
    from mmreason.models import ModelConfig, load_model, load_processor

    processor = load_processor(tiny_model_dir)
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"))
    pad = processor.tokenizer.pad_token_id
    rows = [_text_row(processor.tokenizer)]
    plain = collate(rows, pad)
    model.zero_grad(set_to_none=True)
    lp, _ = token_logprobs(model, plain)
    (lp * plain.action_mask).sum().backward()
    tower = [p for n, p in model.named_parameters() if "visual." in n]
    assert all(p.grad is None for p in tower)  # text only: the tower never ran (another process's would)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    padded = plain.with_stand_ins([stand_in(processor, "image"), stand_in(processor, "video")], pad)
    assert padded.input_ids.shape == plain.input_ids.shape and padded.forward_batch.input_ids.shape[0] == 3
    lp2, _ = token_logprobs(model, padded)
    torch.testing.assert_close(lp2, lp, rtol=0, atol=1e-6)  # a wider, longer batch: float rounding only
    (lp2 * padded.action_mask).sum().backward()
    assert all(p.grad is not None and not p.grad.any() for p in tower)  # ran, forward and backward, weight 0
    for n, g in grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[n].grad, g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("arch, video_call", [("qwen3_vl", "video"), ("qwen3_5", "video"), ("internvl", "image")])
def test_every_family_builds_its_stand_ins(arch, video_call, tmp_path):
    """Each family's own processor makes the rows; InternVL feeds video frames as images (no separate call)."""
    from mmreason.models import load_processor
    from mmreason.models.tiny import build_tiny_model

    processor = load_processor(build_tiny_model(tmp_path / arch, seed=0, arch=arch))
    assert calls([stand_in(processor, "image")]) == {"image"}
    assert calls([stand_in(processor, "video")]) == {video_call}
