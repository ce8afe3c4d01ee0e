"""Every engine guarantee on every model family beyond Qwen2.5-VL (whose own tests live beside the rooms):
tiny checkpoints built through ``mmreason tiny-model --arch``, then padded-batch log-probs, the shared prefix,
batched generation, multi-turn episodes, visual-token counting and the start-up checks, per family."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
import torch
from PIL import Image
from rollout_helpers import generate_multiturn_group

from mmreason.models import ModelConfig, load_model, load_processor
from mmreason.models.families import family_for, family_of_model, family_of_processor
from mmreason.models.tiny import build_tiny_model
from mmreason.rollout import shared_prefix
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import (
    GenerationSettings,
    generate_group,
    generate_groups,
    sample_rows,
    suppressed_token_ids,
)
from mmreason.rollout.prompts import (
    VISUAL_KEYS,
    PromptInputs,
    PromptTooLong,
    build_prompt,
    encode,
    render_chat,
)
from mmreason.rollout.row_sampling import row_seeds
from mmreason.types import Sample
from tests.rollout.test_multiturn import ZoomEnv

FAMILIES = ["qwen3_vl", "qwen3_vl_moe", "qwen3_5", "internvl"]
TEMPERATURE = 0.7


@pytest.fixture(scope="module", params=FAMILIES)
def family_dir(request, tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp(request.param) / "model", seed=0, arch=request.param)


@pytest.fixture(scope="module")
def loaded(family_dir):
    processor = load_processor(family_dir)
    model = load_model(ModelConfig(name_or_path=str(family_dir), dtype="float32"), trainable=False)
    return model, processor


def _sample(i: int, sizes, colour: str = "red", text: str = "What colour?") -> Sample:
    images = [Image.new("RGB", s, (40 * i % 255, 120, 200 - 30 * k)) for k, s in enumerate(sizes)]
    content = [{"type": "image"}] * len(images) + [{"type": "text", "text": f"{text} {i}"}]
    return Sample(id=f"s{i}", messages=[{"role": "user", "content": content}], answer=colour, images=images)


def _video_prompt(processor, sample_id: str, frames: int, fps: float, text: str) -> PromptInputs:
    pixels = (torch.rand(frames, 3, 64, 64, generator=torch.Generator().manual_seed(frames)) * 255).to(torch.uint8)
    messages = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": text}]}]
    chat = render_chat(processor, messages)
    out = encode(
        processor,
        chat,
        [],
        [pixels],
        [{"total_num_frames": frames * 2, "fps": fps, "frames_indices": list(range(0, frames * 2, 2))}],
    )
    return PromptInputs(
        Sample(id=sample_id, messages=messages),
        out["input_ids"][0],
        out["mm_token_type_ids"][0].long(),
        {k: out[k] for k in VISUAL_KEYS if k in out},
        chat,
    )


def test_tiny_checkpoint_is_the_family_with_its_own_processor(family_dir, loaded):
    model, processor = loaded
    config = json.loads((family_dir / "config.json").read_text())
    family = family_of_model(model)
    assert family is family_for(config["model_type"])
    # the prompt builder holds only the processor: what it asks of the family is the checkpoint family's
    prompt_facts = family_of_processor(processor)
    assert (prompt_facts.pixels_per_token, prompt_facts.video_plan) == (family.pixels_per_token, family.video_plan)
    text, vision = config["text_config"], config["vision_config"]
    if config["model_type"] == "internvl":  # 1-D RoPE decoder, tiles of 64 px, 4 tokens a tile
        assert type(processor).__name__ == "InternVLProcessor" and family.positions == "rope1d"
        assert processor.image_seq_length == config["image_seq_length"] == 4
        assert text["head_dim"] >= 32 and vision["hidden_size"] // vision["num_attention_heads"] >= 32
        assert "mrope_section" not in text["rope_parameters"] and family.shared_prefix == "kv"
        return
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert processor.image_processor.patch_size == config["vision_config"]["patch_size"] == 16
    assert family.pixels_per_token == 32 * 32
    assert text["head_dim"] >= 32 and vision["hidden_size"] // vision["num_heads"] >= 32  # vLLM's CPU build
    assert text["rope_parameters"]["mrope_interleaved"]
    if config["model_type"] == "qwen3_5":  # hybrid decoder: linear-attention layers between full-attention ones
        assert text["layer_types"] == ["linear_attention", "full_attention"]
        assert family.shared_prefix == "generation"  # states expanded in generation; the update runs plain
    else:
        assert vision["deepstack_visual_indexes"] and family.shared_prefix == "kv"


def test_same_seed_same_bytes(family_dir, tmp_path):
    arch = json.loads((family_dir / "mmreason_tiny.json").read_text())["arch"]
    again = build_tiny_model(tmp_path / "again", seed=0, arch=arch)
    for name in ("model.safetensors", "config.json", "tokenizer.json", "processor_config.json"):
        assert (
            hashlib.sha256((again / name).read_bytes()).digest()
            == hashlib.sha256((family_dir / name).read_bytes()).digest()
        ), name


def test_visual_tokens_are_the_family_grid_and_long_prompts_are_never_truncated(loaded):
    model, processor = loaded
    if family_of_model(model).budget == "tiles":  # InternVL: 4 tokens a 64 px tile (+ a thumbnail when cut)
        prompt = build_prompt(processor, _sample(0, [(64, 64)]), max_prompt_length=1024)
        assert prompt.visual["pixel_values"].shape[0] == 1 and prompt.visual_tokens == 2 + 4  # <img>, 4, </img>
        big = _sample(1, [(256, 256)] * 3)
        n = build_prompt(processor, big, max_prompt_length=1024).visual_tokens
        for overflow in ("filter", "downscale"):  # pixel budgets cannot shrink tiles: skipped, never truncated
            with pytest.raises(PromptTooLong, match="max_prompt_length"):
                build_prompt(processor, big, max_prompt_length=n, overflow=overflow)
        return
    prompt = build_prompt(processor, _sample(0, [(64, 96)]), max_prompt_length=1024)
    # 64 px wide, 96 px high -> 3 x 2 tokens of 32 x 32 px (16 px patches merged 2 x 2)
    assert prompt.visual["image_grid_thw"].tolist() == [[1, 6, 4]] and prompt.visual_tokens == 6
    big = _sample(1, [(256, 256)] * 3)
    with pytest.raises(PromptTooLong, match="max_prompt_length"):
        build_prompt(processor, big, max_prompt_length=80)
    small = build_prompt(processor, big, max_prompt_length=80, overflow="downscale")
    grid = small.visual["image_grid_thw"]
    assert small.length <= 80 and small.visual_tokens == int((grid.prod(-1) // 4).sum())


def test_logprobs_alone_equal_logprobs_in_a_padded_batch(loaded, one_torch_thread):
    model, processor = loaded
    samples = [_sample(0, [(60, 90)]), _sample(1, [(200, 120), (64, 64)]), _sample(2, [(32, 300)])]
    trajs = []
    for i, s in enumerate(samples):
        prompt = build_prompt(processor, s, max_prompt_length=1024)
        trajs += generate_group(model, processor, prompt, i, 2, settings=GenerationSettings(max_new_tokens=6), seed=i)
    pad = processor.tokenizer.pad_token_id
    with torch.no_grad():
        batched, _ = token_logprobs(model, collate(trajs, pad))
        for row, t in enumerate(trajs):
            alone, _ = token_logprobs(model, collate([t], pad))
            mask = t.action_mask.bool()
            torch.testing.assert_close(batched[row, : t.token_ids.numel()][mask], alone[0][mask], atol=1e-5, rtol=0)


def test_batched_generation_samples_what_per_group_calls_sample(loaded, one_torch_thread):
    """Images of different sizes, a text-only prompt and videos (Qwen3-VL writes their times as text)."""
    model, processor = loaded
    settings = GenerationSettings(max_new_tokens=8, temperature=1.0, top_p=0.95)
    prompts = [
        build_prompt(processor, _sample(0, [(120, 84), (64, 64)]), max_prompt_length=2048),
        build_prompt(processor, _sample(1, []), max_prompt_length=2048),
        _video_prompt(processor, "v0", 4, 4.0, "What moves?"),
        _video_prompt(processor, "v1", 6, 1.0, "Which way does it move?"),
    ]
    shown = processor.tokenizer.decode(prompts[2].input_ids)
    if family_of_model(model).frame_times == "text":
        assert "seconds>" in shown  # Qwen3-VL / Qwen3.5 write frame times as text
    else:
        assert "Frame4:" in shown  # InternVL: frame order only
    seeds = [7, 8, 9, 10]
    batched = generate_groups(model, processor, prompts, [0, 1, 2, 3], 3, settings=settings, seeds=seeds)
    alone = [
        t
        for i, p in enumerate(prompts)
        for t in generate_group(model, processor, p, i, 3, settings=settings, seed=seeds[i])
    ]
    assert [t.token_ids.tolist() for t in batched] == [t.token_ids.tolist() for t in alone]
    # each prompt repeated per row (no prefill, no cache expansion) samples the same rows
    copies = sample_rows(
        model,
        processor.tokenizer,
        [p for p in prompts for _ in range(3)],
        1,
        settings,
        seeds=[r for s in seeds for r in row_seeds(s, 3)],
    )
    for row, t in zip(copies, batched):
        assert row[: t.completion_length].tolist() == t.token_ids[t.prompt_length :].tolist()
    assert len({t.completion_text for t in batched[:3]}) > 1  # it really sampled
    banned = set(suppressed_token_ids(processor.tokenizer))
    assert banned and not banned & {int(x) for t in batched for x in t.token_ids[t.prompt_length :]}


def _cut(t, keep: int):
    end = t.prompt_length + keep
    return dataclasses.replace(
        t, token_ids=t.token_ids[:end], action_mask=t.action_mask[:end], mm_token_type_ids=t.mm_token_type_ids[:end]
    )


def _grads(model, logprobs, mask):
    model.zero_grad(set_to_none=True)
    (logprobs * mask).sum().backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prefix_equals_the_plain_path_in_logprobs_and_gradients(family_dir, loaded, one_torch_thread):
    """Two single-turn groups (multi-image and one image, uneven completions) and a multi-turn group whose
    observations carry images: the shared prefix's log-probs, entropies and every gradient equal the
    padded plain path's (1e-5), DeepStack and the vision tower included. Qwen3.5 (its update declared plain):
    the same holds with its linear-attention states continued from the prompt, except its decay
    parameters' gradients, which differ by 4e-5 to 2e-4 relative (bounded here at 1e-3; see its adapter)."""
    _, processor = loaded
    model = load_model(ModelConfig(name_or_path=str(family_dir), dtype="float32"))
    model.eval()
    trajs = []
    for gid, sizes in enumerate(([(112, 112), (84, 84), (64, 64)], [(96, 64)])):
        prompt = build_prompt(processor, _sample(gid, sizes), max_prompt_length=2048)
        group = generate_group(model, processor, prompt, gid, 3, settings=GenerationSettings(10, TEMPERATURE), seed=gid)
        trajs += [_cut(t, keep) for t, keep in zip(group, (10, 4, 7))]
    mt_prompt = build_prompt(processor, _sample(5, [(84, 84)]), max_prompt_length=2048)
    trajs += generate_multiturn_group(
        model,
        processor,
        mt_prompt,
        ZoomEnv,
        group_id=2,
        num_generations=2,
        settings=GenerationSettings(5, TEMPERATURE),
        max_turns=3,
        max_context=2048,
        seed=0,
        step=1,
    )
    assert any(len(t.visual) > 1 for t in trajs)  # observation images in the suffix
    model.train()
    declared = family_of_model(model).shared_prefix
    assert shared_prefix.applies(model, trajs) == (declared == "kv")  # else the update runs every row whole
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    plain, plain_ent = token_logprobs(model, batch, True, temperature=TEMPERATURE)
    want = _grads(model, plain, batch.action_mask)
    got, got_ent = shared_prefix.shared_prefix_logprobs(
        model, trajs, batch.input_ids.shape[1], processor.tokenizer.pad_token_id, True, temperature=TEMPERATURE
    )
    grads = _grads(model, got, batch.action_mask)
    mask = batch.action_mask.bool()
    torch.testing.assert_close(got[mask].detach(), plain[mask].detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(got_ent[mask].detach(), plain_ent[mask].detach(), atol=1e-5, rtol=0)
    assert want and set(grads) == set(want) and any("visual" in n or "vision_tower" in n for n in want)
    assert any("deepstack" in n for n in want) or "deepstack" not in str(model)
    decay = ("linear_attn.A_log", "linear_attn.dt_bias", "linear_attn.in_proj_a.weight")  # Qwen3.5: its adapter
    for name in want:
        gap = (grads[name] - want[name]).abs().max() / want[name].abs().max().clamp(min=1e-8)
        if declared == "generation" and name.endswith(decay):
            assert gap <= 1e-3, name  # the gap (4e-5 to 2e-4 measured) that keeps its update on the plain path
        else:
            assert gap <= 1e-5, name
    # negative control: completions placed one position late no longer match (1-D RoPE sees only the
    # prompt-to-suffix distance change, a small effect on random weights, still far above 1e-5)
    late, _ = shared_prefix.shared_prefix_logprobs(
        model,
        trajs,
        batch.input_ids.shape[1],
        processor.tokenizer.pad_token_id,
        temperature=TEMPERATURE,
        _position_offset=1,
    )
    assert (late[mask] - plain[mask]).abs().max() > 1e-4  # ten times the tolerance: the comparison sees it


def test_an_unknown_family_is_one_line_naming_the_supported_ones_and_the_file(tmp_path, family_dir):
    config = json.loads((family_dir / "config.json").read_text())
    config["model_type"] = "llava_next"
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as err:
        load_model(ModelConfig(name_or_path=str(tmp_path), dtype="float32"))
    message = str(err.value)
    assert "\n" not in message and "llava_next" in message and "qwen2_5_vl" in message and "qwen3_vl" in message
    assert "mmreason/models/families/" in message and str(tmp_path / "config.json") in message


def test_a_processor_patch_size_disagreeing_with_the_config_fails_at_start_up(tmp_path, family_dir):
    import shutil

    broken = tmp_path / "model"
    shutil.copytree(family_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    if config["model_type"] == "internvl":
        config["image_seq_length"] = 16
        match = r"image_seq_length=16.*image_seq_length=4"
    else:
        config["vision_config"]["patch_size"] = 14
        match = r"patch_size=14.*patch_size=16"
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=match):
        load_processor(broken)


class _Scripted:
    """A policy that emits ``script`` one token per forward pass, whatever it is shown (a forward hook on the
    LM head): an episode whose turns are known text, so its replay can be compared token for token."""

    def __init__(self, model, script: list[int]):
        self.script, self.next = script, 0
        self.handle = model.lm_head.register_forward_hook(self)

    def __call__(self, _module, _args, logits):
        out = torch.full_like(logits, -1e4)
        out[..., self.script[min(self.next, len(self.script) - 1)]] = 0.0
        self.next += 1
        return out


def test_a_multi_turn_sft_replay_is_token_for_token_the_episode(loaded, one_torch_thread):
    from rollout_helpers import run_episode

    from mmreason.rollout.chat_turns import turn_end
    from mmreason.rollout.replay import replay_episode

    model, processor = loaded
    tok = processor.tokenizer
    turns = ['<tool_call>{"name": "zoom"}</tool_call>', "The answer is blue"]
    end = turn_end(processor).strip()
    script = [i for text in (turns[0], turns[1] + end) for i in tok(text, add_special_tokens=False)["input_ids"]]
    prompt = build_prompt(processor, _sample(0, [(84, 84)]), max_prompt_length=1024)
    scripted = _Scripted(model, script)
    try:
        settings = GenerationSettings(32, 0.0, stop_strings=ZoomEnv.stop_strings)
        episode = run_episode(model, processor, prompt, ZoomEnv(), 0, settings, 3, 2048, 0, 0, 0)
    finally:
        scripted.handle.remove()
    assert [t.text for t in episode.turns if t.role == "assistant"] == turns
    replayed = replay_episode(processor, prompt, ZoomEnv(), "".join(turns), end)
    assert torch.equal(replayed.token_ids, episode.token_ids)
    assert torch.equal(replayed.action_mask, episode.action_mask)
    assert torch.equal(replayed.mm_token_type_ids, episode.mm_token_type_ids)
    assert int(episode.mm_token_type_ids[prompt.length :].ne(0).sum()) > 0  # the observation image is in the row
    assert len(replayed.visual) == len(episode.visual) == 2
    for mine, theirs in zip(replayed.visual, episode.visual):
        assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
