"""The prompt ids a vLLM request carries (no vLLM needed): the trainer's expanded visual tokens cut back to the
chat template's placeholders, which vLLM expands itself; per family, because each writes them differently."""

from __future__ import annotations

import pytest
from PIL import Image

from mmreason.models import load_processor
from mmreason.models.tiny import build_tiny_model
from mmreason.rollout.backends.vllm_engine import engine_request, placeholder_ids
from mmreason.rollout.prompts import build_prompt, render_chat
from mmreason.types import Sample


def _sample():
    content = [{"type": "image"}, {"type": "text", "text": "Compare"}, {"type": "image"}, {"type": "text", "text": "?"}]
    return Sample(
        id="two",
        messages=[{"role": "user", "content": content}],
        images=[Image.new("RGB", (112, 84), (200, 30, 30)), Image.new("RGB", (64, 128), (0, 90, 200))],
    )


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "internvl"])
def test_a_request_carries_the_templates_placeholders_not_the_expanded_tokens(arch, tiny_model_dir, tmp_path):
    """Qwen: each ``<|image_pad|>`` run becomes one pad between the vision start / end tokens; InternVL: each
    ``<img> <IMG_CONTEXT>... </img>`` becomes one ``<IMG_CONTEXT>`` (vLLM writes the wrapping itself). Either
    way the request's ids are the chat template's text tokenized as is."""
    model_dir = tiny_model_dir if arch == "qwen2_5_vl" else build_tiny_model(tmp_path / arch, seed=0, arch=arch)
    processor = load_processor(model_dir)
    sample = _sample()
    prompt = build_prompt(processor, sample, max_prompt_length=1024)
    assert prompt.visual_tokens > 2  # expanded
    template = processor.tokenizer(render_chat(processor, sample.messages, None), add_special_tokens=False)
    request = engine_request(prompt, placeholder_ids(processor.tokenizer))
    assert request["prompt_token_ids"] == template["input_ids"]
    assert len(request["multi_modal_data"]["image"]) == 2


def test_internvl_videos_are_refused_with_the_reason(tmp_path):
    processor = load_processor(build_tiny_model(tmp_path / "internvl", seed=0, arch="internvl"))
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    prompt.videos = [prompt.images[0]]  # refused before the media is read: the token ids could never agree
    with pytest.raises(ValueError, match="InternVL videos cannot go through vLLM 0.32"):
        engine_request(prompt, placeholder_ids(processor.tokenizer))
