"""A row's media, turns and text tokens are counted before anything is decoded, and refused past stated limits:
``max_images`` / ``max_videos`` (``data.*`` in a run, ``--model_args`` in an eval), a prompt whose text alone is
over ``max_prompt_length``, a conversation of more than ``MAX_TURNS`` turns (tasks/generic/data.py).

The images below do not exist: a sample refused by its counts never opens them (had it decoded first, the error
would be the missing file). Before: 300 images of a 50 KB row were all decoded before the length filter (8 GB),
and one 30,000-turn ShareGPT row took 41-105 s and 7.4 GB to inspect."""

from __future__ import annotations

import json

import pytest

from mmreason.eval.prompts import encode_batch
from mmreason.eval.scoring import SAMPLE_ERRORS, PromptOptions
from mmreason.models import load_processor
from mmreason.rollout.prompts import PromptTooLong, build_prompt
from mmreason.tasks.generic.data import MAX_TURNS, generic_load
from mmreason.types import Sample, VideoRef


def _sample(images: int, text: str = "what is it?", videos: int = 0) -> Sample:
    content = [{"type": "image"}] * images + [{"type": "video"}] * videos + [{"type": "text", "text": text}]
    return Sample(
        id="s",
        messages=[{"role": "user", "content": content}],
        answer="a",
        images=[f"/nonexistent/{k}.png" for k in range(images)],
        videos=[VideoRef(f"/nonexistent/{k}.mp4") for k in range(videos)],
    )


@pytest.fixture(scope="module")
def processor(tiny_model_dir):
    return load_processor(tiny_model_dir)


def test_media_past_their_caps_are_refused_before_any_is_read(processor):
    with pytest.raises(ValueError, match=r"sample 's': 300 images, over max_images = 64 \(counted before any"):
        build_prompt(processor, _sample(300), max_prompt_length=4096, max_images=64)
    with pytest.raises(ValueError, match=r"sample 's': 9 videos, over max_videos = 8"):
        build_prompt(processor, _sample(0, videos=9), max_prompt_length=4096, max_videos=8)
    # the eval's batched path counts them too, before it decodes any doc's media
    [result] = encode_batch(processor, [_sample(300)], PromptOptions(), SAMPLE_ERRORS)
    assert isinstance(result, ValueError) and "300 images, over max_images = 64" in str(result)


def test_text_over_the_prompt_length_is_filtered_before_its_media_are_decoded(processor):
    with pytest.raises(
        PromptTooLong, match=r"its text alone has \d+ tokens \(nothing decoded\) > max_prompt_length 50"
    ):
        build_prompt(processor, _sample(2, text="word " * 400), max_prompt_length=50, max_images=64)


def test_a_conversation_past_max_turns_is_refused_when_the_data_loads(tmp_path):
    turns = [{"from": "human" if k % 2 == 0 else "gpt", "value": "hi"} for k in range(MAX_TURNS + 2)]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps([{"conversations": turns}]))
    with pytest.raises(ValueError, match=rf"field 'conversations' has {MAX_TURNS + 2} turns, over the cap of 512"):
        generic_load(str(path))
