"""The update's shared prefix: each group's prompt (vision tower included) runs once and its G completions
attend to the cached prompt. Log-probs and every parameter's gradient equal the plain padded path."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from PIL import Image

from mmreason.models import ModelConfig, load_model
from mmreason.rollout import shared_prefix
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings, generate_group
from mmreason.rollout.prompts import build_prompt
from mmreason.types import Sample

TEMPERATURE = 0.7


def _groups(model, processor, pages=(("red", 112), ("blue", 84), ("green", 56))):
    """Two groups of different prompt lengths (one multi-page, one single image) and uneven completions,
    sampled in eval mode; the model is left in train mode."""
    model.eval()
    out = []
    for gid, n_images in enumerate((len(pages), 1)):
        images = [Image.new("RGB", (px, px), c) for c, px in pages[:n_images]]
        content = [{"type": "image"}] * n_images + [{"type": "text", "text": f"Question {gid}?"}]
        sample = Sample(id=f"s{gid}", messages=[{"role": "user", "content": content}], answer="a", images=images)
        prompt = build_prompt(processor, sample, max_prompt_length=2048)
        group = generate_group(
            model,
            processor,
            prompt,
            gid,
            3,
            settings=GenerationSettings(max_new_tokens=10, temperature=TEMPERATURE),
            seed=gid,
        )
        out += [_cut(t, keep) for t, keep in zip(group, (10, 4, 7))]  # uneven completions: padding in play
    model.train()
    return out


def _cut(t, keep: int):
    """The trajectory with only its first ``keep`` completion tokens."""
    end = t.prompt_length + keep
    return dataclasses.replace(
        t, token_ids=t.token_ids[:end], action_mask=t.action_mask[:end], mm_token_type_ids=t.mm_token_type_ids[:end]
    )


def _grads(model, logprobs, mask):
    model.zero_grad(set_to_none=True)
    (logprobs * mask).sum().backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _check(model, processor, trajs, offset: int = 0):
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    plain, plain_ent = token_logprobs(model, batch, True, temperature=TEMPERATURE)
    want = _grads(model, plain, batch.action_mask)
    got_lp, got_ent = shared_prefix.shared_prefix_logprobs(
        model,
        trajs,
        batch.input_ids.shape[1],
        processor.tokenizer.pad_token_id,
        True,
        temperature=TEMPERATURE,
        _position_offset=offset,
    )
    mask = batch.action_mask.bool()
    got = _grads(model, got_lp, batch.action_mask)
    return plain[mask].detach(), got_lp[mask].detach(), plain_ent[mask].detach(), got_ent[mask].detach(), want, got


def _assert_equal(result, entropies: bool = True) -> None:
    """Log-probs (and entropies) within 1e-5 of the plain path; every gradient within 1e-5 of its scale."""
    plain, got, plain_ent, got_ent, want, grads = result
    torch.testing.assert_close(got, plain, atol=1e-5, rtol=0)
    if entropies:
        torch.testing.assert_close(got_ent, plain_ent, atol=1e-5, rtol=0)
    assert want and set(grads) == set(want)
    for name in want:
        assert (grads[name] - want[name]).abs().max() <= 1e-5 * want[name].abs().max().clamp(min=1e-8), name


@pytest.fixture
def trainable(tiny_model_dir):
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"))
    model.train()
    return model


def test_logprobs_and_gradients_equal_the_plain_path(trainable, tiny, one_torch_thread):
    _, processor = tiny
    trajs = _groups(trainable, processor)
    assert shared_prefix.applies(trainable, trajs)
    result = _check(trainable, processor, trajs)
    _assert_equal(result)
    assert any("visual" in n for n in result[-1])  # the gradient reaches the vision tower through the cached prompt


def test_a_wrong_position_offset_is_caught(trainable, tiny, one_torch_thread):
    """Negative control: completions placed one position late no longer match the plain path."""
    _, processor = tiny
    trajs = _groups(trainable, processor)
    plain, got, *_ = _check(trainable, processor, trajs, offset=1)
    assert (got - plain).abs().max() > 1e-3


def test_lora_and_checkpointing(tiny_model_dir, tiny, one_torch_thread):
    _, processor = tiny
    lora = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32", lora=True, lora_r=4))
    trajs = _groups(lora, processor)
    assert shared_prefix.applies(lora, trajs)
    _assert_equal(_check(lora, processor, trajs), entropies=False)
    # Checkpointed layers replay their forward in backward: the passes' caches must survive the replay.
    checkpointed = load_model(
        ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32", gradient_checkpointing=True)
    )
    checkpointed.train()
    assert checkpointed.model.language_model.layers[0].gradient_checkpointing
    assert shared_prefix.applies(checkpointed, trajs)
    _assert_equal(_check(checkpointed, processor, trajs), entropies=False)


def test_each_prompt_once_and_logits_only_for_completion_tokens(trainable, tiny, one_torch_thread):
    """Per group: the vision tower runs once; the LM head sees the prompt's last position (it predicts every
    completion's first token) and then one row per later completion token: no prompt rows, no padding."""
    _, processor = tiny
    trajs = _groups(trainable, processor)
    heads, towers = [], []
    hooks = [
        trainable.lm_head.register_forward_hook(lambda m, i, o: heads.append(tuple(i[0].shape[:2]))),
        trainable.model.visual.register_forward_hook(lambda m, i, o: towers.append(1)),
    ]
    try:
        with torch.no_grad():
            shared_prefix.shared_prefix_logprobs(
                trainable, trajs, max(t.token_ids.numel() for t in trajs), processor.tokenizer.pad_token_id
            )
    finally:
        for h in hooks:
            h.remove()
    assert len(towers) == 2  # two groups
    later = [sum(t.completion_length - 1 for t in trajs if t.group_id == g) for g in (0, 1)]
    assert heads == [(1, 1), (1, later[0]), (1, 1), (1, later[1])]


def test_video_prompts_equal_the_plain_path(trainable, tiny, one_torch_thread):
    """Groups whose prompts hold videos of different lengths and frame rates (their own temporal M-RoPE
    steps): log-probs and gradients equal the plain padded path."""
    from test_batched_generation import _video_prompt

    _, processor = tiny
    trainable.eval()
    trajs = []
    for gid, (frames, fps) in enumerate(((4, 4.0), (6, 1.0))):
        prompt = _video_prompt(processor, f"v{gid}", frames, fps, "What moves, and which way?")
        group = generate_group(
            trainable,
            processor,
            prompt,
            gid,
            3,
            settings=GenerationSettings(max_new_tokens=8, temperature=TEMPERATURE),
            seed=gid,
        )
        trajs += [_cut(t, keep) for t, keep in zip(group, (8, 3, 5))]
    trainable.train()
    assert all(t.mm_token_type_ids.eq(2).any() for t in trajs) and shared_prefix.applies(trainable, trajs)
    result = _check(trainable, processor, trajs)
    _assert_equal(result)
    assert any("visual" in n for n in result[-2])


class _TextEnv:
    """Answers every turn with text only (a retrieved passage, say)."""

    stop_strings = ("</tool_call>",)

    def reset(self, sample):
        self.turns = 0

    def step(self, action_text):
        from mmreason.rollout.environment import Observation

        self.turns += 1
        return Observation(text=f"passage {self.turns}: the square is blue", done=self.turns >= 3)


@pytest.mark.parametrize("env_name", ["images", "text"])
def test_multiturn_episodes_equal_the_plain_path(trainable, tiny, one_torch_thread, env_name):
    """Episodes with observation turns (masked; images in one env, text in the other) in groups of uneven
    length: the update's log-probs and gradients equal the plain padded path, observation tokens get 0."""
    from rollout_helpers import generate_multiturn_group
    from test_multiturn import ZoomEnv, _sample

    class ShowsItsOwnImage(ZoomEnv):
        def reset(self, sample):
            self.image, self.calls = Image.new("RGB", (84, 84), "blue"), 0

    _, processor = tiny
    env = {"images": ShowsItsOwnImage, "text": _TextEnv}[env_name]
    trainable.eval()
    trajs = []
    for gid, n_images in enumerate((1, 0)):
        sample = _sample()
        if not n_images:  # a text-only prompt: every image of the episode comes from the environment
            sample = dataclasses.replace(
                sample,
                images=[],
                messages=[{"role": "user", "content": [{"type": "text", "text": "Look, then answer: what colour?"}]}],
            )
        prompt = build_prompt(processor, sample, max_prompt_length=1024)
        trajs += generate_multiturn_group(
            trainable,
            processor,
            prompt,
            env,
            gid,
            3,
            GenerationSettings(max_new_tokens=6, temperature=TEMPERATURE),
            max_turns=3,
            max_context=4096,
            seed=gid,
            step=1,
        )
    trainable.train()
    assert any(turn.role == "observation" for t in trajs for turn in t.turns)
    assert shared_prefix.applies(trainable, trajs)
    _assert_equal(_check(trainable, processor, trajs))
