"""Padding-free packing: a mini-batch's sequences in one row, each with its own positions and boundaries.

On every family, for text-only, image, multi-image, video and multi-turn rows (observation images), the packed
forward's log-probs, entropies and every parameter's gradient equal the padded path's (1e-5, fp32), with the
vision stand-ins too; the packed row holds no padding. Qwen3.5 (linear-attention layers) is refused, and the
refusal is needed: forced, its packed log-probs differ."""

from __future__ import annotations

import contextlib

import pytest
import torch
from PIL import Image

from mmreason.models import ModelConfig, load_model, load_processor
from mmreason.models.tiny import build_tiny_model
from mmreason.rollout import packing
from mmreason.rollout.environment import Observation
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.multiturn import encode_observation
from mmreason.rollout.prompts import VISUAL_KEYS, build_prompt, encode, render_chat
from mmreason.rollout.stand_ins import stand_in
from mmreason.types import Sample, Trajectory

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "internvl", "qwen3_5"]
TEMPERATURE = 0.7
WORDS = "the answer is a small red square near the top left corner of the page and nothing else"


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    """(arch, model, processor): one tiny checkpoint per family, fp32, trainable, in train mode."""
    path = build_tiny_model(tmp_path_factory.mktemp(request.param) / "model", seed=0, arch=request.param)
    model = load_model(ModelConfig(name_or_path=str(path), dtype="float32"))
    model.train()
    return request.param, model, load_processor(path)


def _words(processor, n: int) -> torch.Tensor:
    ids = processor.tokenizer(WORDS, add_special_tokens=False)["input_ids"]
    return torch.tensor((ids * (n // len(ids) + 1))[:n])


def _row(sid: str, gid: int, parts: list[tuple[torch.Tensor, torch.Tensor, dict, bool]]) -> Trajectory:
    """A trajectory from (ids, mm types, visual, trained) pieces in order; the first piece is the prompt."""
    ids = torch.cat([p[0] for p in parts])
    return Trajectory(
        sample_id=sid,
        group_id=gid,
        token_ids=ids,
        action_mask=torch.cat([torch.full_like(p[0], int(p[3]), dtype=torch.float32) for p in parts]),
        prompt_length=len(parts[0][0]),
        completion_text="",
        mm_token_type_ids=torch.cat([p[1] for p in parts]),
        visual=[p[2] for p in parts if p[2]],
    )


def _prompt(processor, images=(), video: int = 0):
    content = [{"type": "image"}] * len(images) + [{"type": "video"}] * bool(video)
    messages = [{"role": "user", "content": [*content, {"type": "text", "text": "What is shown?"}]}]
    if not video:
        sample = Sample(id="s", messages=messages, answer="a", images=list(images))
        p = build_prompt(processor, sample, max_prompt_length=4096)
        return p.input_ids, p.mm_token_type_ids, dict(p.visual), False
    frames = (torch.rand(video, 3, 64, 64, generator=torch.Generator().manual_seed(video)) * 255).to(torch.uint8)
    meta = {"total_num_frames": 2 * video, "fps": 2.0, "frames_indices": list(range(0, 2 * video, 2))}
    out = encode(processor, render_chat(processor, messages), [], [frames], [meta])
    types = out["mm_token_type_ids"][0].long()
    return out["input_ids"][0], types, {k: out[k] for k in VISUAL_KEYS if k in out}, False


def _completion(processor, n: int):
    ids = _words(processor, n)
    return ids, torch.zeros_like(ids), {}, True


def _rows(processor) -> list[Trajectory]:
    """Text-only, image, multi-image, video and multi-turn rows, completions long-tailed (3 to 40 tokens)."""
    red, blue = Image.new("RGB", (96, 64), (200, 30, 30)), Image.new("RGB", (64, 128), (30, 30, 200))
    obs_ids, obs_types, obs_visual = encode_observation(
        processor, Observation(text="zoomed", images=[Image.new("RGB", (64, 64), (20, 160, 40))]), closed=True
    )
    return [
        _row("text", 0, [_prompt(processor), _completion(processor, 5)]),
        _row("image", 1, [_prompt(processor, [red]), _completion(processor, 40)]),
        _row("images", 2, [_prompt(processor, [red, blue]), _completion(processor, 3)]),
        _row("video", 3, [_prompt(processor, video=4), _completion(processor, 9)]),
        _row(
            "turns",
            4,
            [
                _prompt(processor, [blue]),
                _completion(processor, 6),
                (obs_ids, obs_types, obs_visual, False),
                _completion(processor, 4),
            ],
        ),
    ]


def _grads(model, logprobs, mask):
    model.zero_grad(set_to_none=True)
    (logprobs * mask).sum().backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _embedded_shapes(model, fn):
    """``fn()``, the shapes of the token batches the decoder embedded while it ran and its attention then."""
    shapes = []

    def hook(_module, args, _out):
        shapes.append((args[0].shape, model.config.text_config._attn_implementation))

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        return fn(), shapes
    finally:
        handle.remove()


def _check_gradients(grads, want):
    assert want and set(grads) == set(want) and any("visual" in n or "vision_tower" in n for n in want)
    for name in want:
        gap = (grads[name] - want[name]).abs().max() / want[name].abs().max().clamp(min=1e-8)
        assert gap <= 1e-5, name


def test_packed_equals_padded_in_logprobs_entropies_and_gradients(family, monkeypatch):
    """Sequence by sequence SDPA (the default), and transformers' block-diagonal mask (a checkpointed
    decoder's path)."""
    arch, model, processor = family
    if arch == "qwen3_5":
        pytest.skip("refused: test_linear_attention_is_refused_and_falls_back")
    assert packing.applies(model)
    trajs = _rows(processor)
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    assert (batch.attention_mask == 0).float().mean() > 0.15  # real padding in play
    padded, padded_ent = token_logprobs(model, batch, True, temperature=TEMPERATURE)
    want = _grads(model, padded, batch.action_mask)
    mask = batch.action_mask.bool()
    mask[:, 0] = False
    row = torch.Size([1, sum(t.token_ids.numel() for t in trajs)])  # one row, no pad column
    for attention in ("sdpa_segments", "sdpa"):
        if attention == "sdpa":
            monkeypatch.setattr(packing, "segment_attention", lambda *_: contextlib.nullcontext())
        (got, got_ent), shapes = _embedded_shapes(
            model, lambda: token_logprobs(model, batch, True, temperature=TEMPERATURE, packed=True)
        )
        assert shapes == [(row, attention)]
        grads = _grads(model, got, batch.action_mask)
        assert got.shape == padded.shape and not got[~mask].any()
        torch.testing.assert_close(got[mask].detach(), padded[mask].detach(), atol=1e-5, rtol=0)
        torch.testing.assert_close(got_ent[mask].detach(), padded_ent[mask].detach(), atol=1e-5, rtol=0)
        _check_gradients(grads, want)


def test_positions_without_the_visual_grid_are_seen(family, monkeypatch):
    """Negative control (the field's packing bug): each sequence's boundaries kept but its M-RoPE axes given the
    text positions (images and video laid out as text) move the log-probs 10x past the tolerance, so the
    comparison above sees the 3-D positions; 1-D RoPE (InternVL): positions running on across sequences.
    (One rope index over the whole packed row with the boundaries kept is no bug: it shifts each sequence's
    positions by a constant on every axis, which rotary attention does not see.)"""
    arch, model, processor = family
    if arch == "qwen3_5":
        pytest.skip("refused")
    batch = collate(_rows(processor), processor.tokenizer.pad_token_id)
    right = packing.packed_positions(model, batch, batch.visual)
    if arch == "internvl":
        wrong_positions = torch.arange(right.shape[-1])[None]
    else:
        wrong_positions = right[:1].expand(4, 1, -1)
    monkeypatch.setattr(packing, "packed_positions", lambda *_: wrong_positions)
    with torch.no_grad():
        padded, _ = token_logprobs(model, batch, temperature=TEMPERATURE)
        wrong, _ = token_logprobs(model, batch, temperature=TEMPERATURE, packed=True)
    mask = batch.action_mask.bool()
    assert (wrong[mask] - padded[mask]).abs().max() > 1e-4


def test_packed_with_vision_stand_ins_equals_padded(family):
    """A mini-batch with no image or video of its own, given both stand-ins (as under DDP / FSDP): the rows'
    log-probs are the padded path's and the vision tower gets its (zero) gradient."""
    arch, model, processor = family
    if arch == "qwen3_5":
        pytest.skip("refused")
    text = _rows(processor)[0]
    batch = collate([text], processor.tokenizer.pad_token_id)
    batch = batch.with_stand_ins([stand_in(processor, "image"), stand_in(processor, "video")], 0)
    padded, _ = token_logprobs(model, batch, temperature=TEMPERATURE)
    want = _grads(model, padded, batch.action_mask)
    got, _ = token_logprobs(model, batch, temperature=TEMPERATURE, packed=True)
    grads = _grads(model, got, batch.action_mask)
    assert got.shape == padded.shape == batch.action_mask.shape
    torch.testing.assert_close(got.detach(), padded.detach(), atol=1e-5, rtol=0)
    assert set(grads) == set(want) and any("visual" in n or "vision_tower" in n for n in grads)
    for name in want:
        torch.testing.assert_close(grads[name], want[name], atol=1e-6, rtol=0, msg=name)


def test_linear_attention_is_refused_and_falls_back(family):
    """Qwen3.5: refused with its reason, so the update takes the padded path; forced, packing lets one
    sequence's convolution and recurrent state reach the next (the reason)."""
    arch, model, processor = family
    if arch != "qwen3_5":
        pytest.skip("Qwen3.5 only")
    assert "linear-attention" in packing.refusal(model) and not packing.applies(model)
    assert not packing.uses(True, model)
    batch = collate(_rows(processor), processor.tokenizer.pad_token_id)
    with torch.no_grad():
        padded, _ = token_logprobs(model, batch, temperature=TEMPERATURE)
        forced, _ = token_logprobs(model, batch, temperature=TEMPERATURE, packed=True)
    mask = batch.action_mask.bool()
    mask[:, 0] = False
    first = batch.attention_mask[0].sum()  # the first sequence has nothing before it: unchanged
    torch.testing.assert_close(
        forced[0, :first][mask[0, :first]], padded[0, :first][mask[0, :first]], atol=1e-5, rtol=0
    )
    assert (forced[1:][mask[1:]] - padded[1:][mask[1:]]).abs().max() > 1e-4


@pytest.mark.parametrize("setting", ["attn_implementation=eager", "gradient_checkpointing"])
def test_eager_attention_and_a_checkpointed_decoder_pack_under_the_block_diagonal_mask(setting, tiny_model_dir):
    """Qwen2.5-VL with eager attention, or with gradient checkpointing (whose backward replays the layers after the
    packed forward): transformers' block-diagonal mask, the padded path's log-probs and gradients."""
    path = tiny_model_dir
    options = {"attn_implementation": "eager"} if setting.startswith("attn") else {"gradient_checkpointing": True}
    model = load_model(ModelConfig(name_or_path=str(path), dtype="float32", **options))
    model.train()
    processor = load_processor(path)
    batch = collate(_rows(processor), processor.tokenizer.pad_token_id)
    padded, _ = token_logprobs(model, batch, temperature=TEMPERATURE)
    want = _grads(model, padded, batch.action_mask)
    got, shapes = _embedded_shapes(model, lambda: token_logprobs(model, batch, temperature=TEMPERATURE, packed=True))
    assert [name for _, name in shapes] == [model.config.text_config._attn_implementation]  # not sequence by sequence
    grads = _grads(model, got[0], batch.action_mask)
    mask = batch.action_mask.bool()
    torch.testing.assert_close(got[0][mask].detach(), padded[mask].detach(), atol=1e-5, rtol=0)
    _check_gradients(grads, want)
