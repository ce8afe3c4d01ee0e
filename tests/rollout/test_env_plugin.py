"""A user's environment file attached to any pack (``rollout.environment``): loaded and checked up front (errors name
the key), its tools shown to the model through the chat template, and an image-returning tool's crop entering the
next turn with its visual tokens, fitted to the run's pixel budget, with the sampler's log-probs equal to the
trainer's recomputed ones (HF)."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from mmreason.rollout.env_plugin import EnvironmentConfigError, attach_environment, load_environment
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.multiturn import EpisodeStart, run_episodes
from mmreason.rollout.prompts import build_prompt
from mmreason.rollout.tool_prompt import render_with_tools
from mmreason.taskpack import TASKS
from mmreason.train.update import sampling_options
from mmreason.types import Sample

ROOT = Path(__file__).resolve().parents[2]
ZOOM = "examples/environments/zoom.py:ZoomEnvironment"
CALL = '<tool_call>{"name": "zoom", "arguments": {"box": [0.25, 0.25, 0.75, 0.75]}}</tool_call>'


def _sample(side: int = 224) -> Sample:
    image = Image.new("RGB", (side, side), "grey")
    image.paste((200, 20, 20), (100, 100, 124, 124))
    content = [{"type": "image"}, {"type": "text", "text": "What colour is the small square?"}]
    return Sample(id="z0", messages=[{"role": "user", "content": content}], answer="red", images=[image])


def test_a_wrong_reference_or_argument_is_one_line_naming_the_key(tmp_path):
    with pytest.raises(EnvironmentConfigError, match=r"^rollout.environment: environment file 'nope.py' not found"):
        load_environment("nope.py:Env", base_dir=str(tmp_path))
    with pytest.raises(EnvironmentConfigError, match=r"^rollout.environment_args: .* does not take \['zoom'\]"):
        load_environment(ZOOM, {"zoom": 2}, base_dir=str(ROOT))
    (tmp_path / "half.py").write_text("class Half:\n    stop_strings = ()\n    def reset(self, sample): pass\n")
    with pytest.raises(EnvironmentConfigError, match="built a Half without step"):
        load_environment("half.py:Half", base_dir=str(tmp_path))
    with pytest.raises(EnvironmentConfigError, match=r"^--environment: .*raised ValueError"):
        load_environment(ZOOM, {"zoom_pixels": 0}, base_dir=str(ROOT), key="--environment")


def test_the_tools_reach_the_prompt_through_the_chat_template(tiny):
    _, processor = tiny
    factory = load_environment(ZOOM, {"max_calls": 1}, base_dir=str(ROOT))
    pack = attach_environment(TASKS.get("generic"), factory)
    assert pack.max_turns == 2 and pack.make_environment is factory and TASKS.get("generic").make_environment is None
    sample = pack.prepare(_sample(), split="train", seed=0, step=0)
    assert [t["function"]["name"] for t in sample.tools] == ["zoom"]
    text = build_prompt(processor, sample, max_prompt_length=1024, max_pixels=12544).text
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\n# Tools\n") and '"name": "zoom"' in system
    assert '<tool_call>\n{"name": <function-name>' in system  # the template's own Hermes block
    # A template that renders no tools (as Qwen2.5-VL's published one): the same block goes into the system turn
    plain = copy.copy(processor)
    plain.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] if m['content'] is string else "
        "m['content'][-1]['text'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
        "{% endif %}"
    )
    text = render_with_tools(plain, [{"role": "user", "content": "hi"}], sample.tools)
    assert (
        text.startswith("<|im_start|>system\n# Tools\n") and '"name": "zoom"' in text and text.endswith("assistant\n")
    )


class FirstTurnZooms:
    """The example environment, with the first turn's call written for the model (a random tiny model writes
    none): what follows -- the crop, its encoding, the budget, the log-probs -- is the engine's own path."""

    def __init__(self, env):
        self.env, self.stop_strings, self.turn = env, env.stop_strings, 0

    def reset(self, sample):
        self.env.reset(sample)

    def step(self, text):
        self.turn += 1
        return self.env.step(CALL if self.turn == 1 else text)


def test_a_tools_image_enters_the_next_turn_within_the_budget_with_equal_logprobs(tiny, one_torch_thread):
    model, processor = tiny
    factory = load_environment(ZOOM, {"zoom_pixels": 448 * 448}, base_dir=str(ROOT))  # the crop: 448 x 448 px
    sample = attach_environment(TASKS.get("generic"), factory).prepare(_sample(), split="train", seed=0, step=0)
    prompt = build_prompt(processor, sample, max_prompt_length=1024, min_pixels=3136, max_pixels=12544)
    settings = GenerationSettings(max_new_tokens=6, temperature=0.7)
    trajs = run_episodes(
        model,
        processor,
        [EpisodeStart(prompt, FirstTurnZooms(factory()), 0, i) for i in range(2)],
        settings,
        max_turns=3,
        max_context=2048,
        seed=3,
        step=1,
        with_logprobs=True,
        image_budget=(3136, 12544),
    )
    for t in trajs:
        assert t.end is None, t.end
        obs = next(u for u in t.turns if u.role == "observation")
        assert obs.text.startswith("<tool_response>\nzoom [0.25, 0.25, 0.75, 0.75]")
        (shown,) = t.reward_info["observation_images"]
        assert shown.size == (112, 112)  # 448 x 448 fitted into max_pixels 12544, as a prompt's image is
        span = t.mm_token_type_ids[obs.start : obs.end]
        assert int((span == 1).sum()) == 16 and not t.action_mask[obs.start : obs.end].any()  # 112^2 / 28^2 tokens
        assert t.visual[1]["image_grid_thw"].tolist() == [[1, 8, 8]]  # the crop's own pixels reach the tower
        assert t.tool_calls[0]["images"] == 1
    run = SimpleNamespace(cfg=SimpleNamespace(rollout=SimpleNamespace(temperature=0.7)), processor=processor)
    with torch.no_grad():  # the update path's log-probs of the recorded trajectories
        trainer, _ = token_logprobs(model, collate(trajs, processor.tokenizer.pad_token_id), **sampling_options(run))
    for row, t in enumerate(trajs):
        mask = t.action_mask.bool()
        assert mask[prompt.length :].sum() >= 2 and (t.rollout_logprobs[mask] < 0).all()
        torch.testing.assert_close(t.rollout_logprobs[mask], trainer[row, : mask.numel()][mask], atol=1e-5, rtol=0)
