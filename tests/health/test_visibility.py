"""Can the model see it? A template that drops images, a chat that names media the sample lacks, placeholder
tokens that disagree with the features, and an observation image that never reaches the prompt."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image
from rollout_helpers import generate_multiturn_group

from mmreason.cli import main
from mmreason.rollout.environment import Observation
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.multiturn import UNSEEN_MEDIA
from mmreason.rollout.prompts import build_prompt
from mmreason.rollout.visibility import UnseenMedia, check_encoded
from mmreason.types import Sample

ROOT = Path(__file__).resolve().parents[2]
IMAGE_SLOT = "<|vision_start|><|image_pad|><|vision_end|>"


def _sample(n_named: int = 1) -> Sample:
    content = [{"type": "image"}] * n_named + [{"type": "text", "text": "What colour?"}]
    return Sample(
        id="s-0",
        messages=[{"role": "user", "content": content}],
        answer="blue",
        images=[Image.new("RGB", (56, 56), "blue")],
    )


def _later_turns_drop_images(template: str) -> str:
    """The template, changed to render no image placeholder in a message after an assistant turn."""
    flag = "{%- set after = namespace(value=false) -%}\n"
    template = template.replace(
        "{%- for message in messages -%}",
        flag + "{%- for message in messages -%}\n"
        "{%- if message['role'] == 'assistant' %}{% set after.value = true %}{% endif -%}",
        1,
    )
    return template.replace(IMAGE_SLOT, "{% if not after.value %}" + IMAGE_SLOT + "{% endif %}")


def test_chat_naming_more_media_than_the_sample_has(tiny):
    _, processor = tiny
    with pytest.raises(UnseenMedia, match="names 2 image") as info:
        build_prompt(processor, _sample(n_named=2), max_prompt_length=512)
    assert info.value.report["sample_id"] == "s-0"


def test_placeholder_tokens_must_equal_feature_tokens(tiny):
    """One 56x56 image: grid [1, 4, 4] patches, merge 2 -> 16 / 4 = 4 feature tokens; three pads are one short."""
    _, processor = tiny
    pad = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
    visual = {"image_grid_thw": torch.tensor([[1, 4, 4]])}
    check_encoded(processor, torch.tensor([1, pad, pad, pad, pad, 2]), visual, 1, 0)  # 4 = 4: fine
    with pytest.raises(UnseenMedia, match="3 image placeholder token"):
        check_encoded(processor, torch.tensor([1, pad, pad, pad, 2]), visual, 1, 0)
    with pytest.raises(UnseenMedia, match="2 image"):
        check_encoded(processor, torch.tensor([1, pad, pad, pad, pad, 2]), visual, 2, 0)


class ImageEnv:
    """Answers every turn with an image (a zoom tool, say)."""

    stop_strings = ()

    def reset(self, sample: Sample) -> None:
        self.calls = 0

    def step(self, action_text: str) -> Observation:
        self.calls += 1
        return Observation(text="zoomed:", images=[Image.new("RGB", (56, 56), "red")], done=self.calls >= 2)


@pytest.mark.parametrize("broken", [False, True])
def test_observation_image_that_never_reaches_the_prompt(tiny, broken):
    """With a template that drops images after the first assistant turn, the observation's image would not
    reach the model: the episode ends there, naming it (``unseen_media``); with the real template it plays on."""
    model, processor = tiny
    if broken:
        processor = copy.copy(processor)
        processor.chat_template = _later_turns_drop_images(processor.chat_template)
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)  # the first turn's image is kept
    trajs = generate_multiturn_group(
        model,
        processor,
        prompt,
        ImageEnv,
        group_id=0,
        num_generations=2,
        settings=GenerationSettings(max_new_tokens=3),
        max_turns=3,
        max_context=2048,
        seed=0,
        step=1,
    )
    for t in trajs:
        unseen = t.unseen_media
        if broken:
            assert unseen["problems"] == ["the chat template rendered 0 image placeholder(s) for 1 image(s) fed"]
            assert str(t.end).startswith(UNSEEN_MEDIA) and [u.role for u in t.turns] == ["assistant"]
        else:
            assert unseen is None and [u.role for u in t.turns] == ["assistant", "observation", "assistant"]


@pytest.mark.slow
def test_broken_template_stops_the_run_with_a_dump(tiny_model_dir, shapes_cache, tmp_path):
    """A checkpoint whose chat template renders no image placeholder: every prompt of the first step fails
    the check, each is counted and dumped (sample id, counts, path), and the run stops there."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    template = (model / "chat_template.jinja").read_text()
    assert IMAGE_SLOT in template
    (model / "chat_template.jinja").write_text(template.replace(IMAGE_SLOT, ""))
    out = tmp_path / "run"
    code = main(
        [
            "train",
            str(ROOT / "configs" / "quickstart.yaml"),
            f"model.name_or_path={model}",
            f"output_dir={out}",
            "max_steps=2",
            "prompts_per_step=4",
            "rollout.num_generations=2",
            "eval_steps=0",
            "save_steps=0",
            "log_completions_steps=0",
        ]
    )
    assert code == 2
    dump = [json.loads(line) for line in (out / "unseen_media.jsonl").read_text().splitlines()]
    assert len(dump) == 4 and all(d["step"] == 1 and d["sample_id"].startswith("shapes-") for d in dump)
    assert all(
        d["problems"] == ["the chat template rendered 0 image placeholder(s) for 1 image(s) fed"]
        and d["paths"][0].endswith(".png")
        for d in dump
    )
    events = [json.loads(line) for line in (out / "events.log").read_text().splitlines()]
    assert sum(e["event"] == "unseen_media" for e in events) == 4
