"""What server mode sends between a training run and ``mmreason vllm-serve`` (JSON, arrays as base64 bytes):
the decoded request is the colocate path's, bit for bit, and malformed payloads are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from mmreason.rollout.backends.vllm_wire import (
    WireError,
    decode_array,
    decode_request,
    decode_settings,
    encode_array,
    encode_request,
    encode_settings,
)
from mmreason.rollout.generate import GenerationSettings


def test_a_request_with_images_and_video_frames_round_trips_exactly():
    rng = np.random.default_rng(0)
    image = Image.fromarray(rng.integers(0, 256, (21, 34, 3), dtype=np.uint8))
    frames = rng.integers(0, 256, (2, 28, 56, 3), dtype=np.uint8)
    meta = {"total_num_frames": 12, "fps": 6.0, "frames_indices": [3, 9], "video_backend": "pyav"}
    req = {
        "prompt_token_ids": [1, 5, 7, 5, 2],
        "multi_modal_data": {"image": [image], "video": [(frames, meta)]},
        "mm_processor_kwargs": {"do_sample_frames": False},
    }
    back = decode_request(json.loads(json.dumps(encode_request(req))))  # through JSON text, as on the wire
    assert back["prompt_token_ids"] == req["prompt_token_ids"]
    (im,) = back["multi_modal_data"]["image"]
    assert im.mode == "RGB" and im.size == (34, 21) and np.array_equal(np.asarray(im), np.asarray(image))
    ((got, got_meta),) = back["multi_modal_data"]["video"]
    assert got.dtype == np.uint8 and np.array_equal(got, frames) and got_meta == meta
    assert back["mm_processor_kwargs"] == {"do_sample_frames": False}


def test_float_arrays_and_settings_round_trip():
    a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    assert np.array_equal(decode_array(json.loads(json.dumps(encode_array(a)))), a)
    s = GenerationSettings(max_new_tokens=7, temperature=0.7, top_p=0.9, top_k=5, stop_strings=("</answer>",))
    assert decode_settings(json.loads(json.dumps(encode_settings(s)))) == s


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"prompt_token_ids": []}, "non-empty"),
        ({"prompt_token_ids": [1, -2]}, "non-empty"),
        ({"prompt_token_ids": [1], "videos": [{"frames": {"dtype": "object", "shape": [1], "data": ""}}]}, "header"),
        (
            {"prompt_token_ids": [1], "videos": [{"frames": {"dtype": "uint8", "shape": [2, 2], "data": "AAA="}}]},
            "does not fit",
        ),
        ({"prompt_token_ids": [1], "images": [{"mode": "RGB", "size": [0, 4], "data": ""}]}, "header"),
        ({"prompt_token_ids": [1], "mm_processor_kwargs": {"trust_remote_code": True}}, "do_sample_frames"),
    ],
)
def test_malformed_payloads_are_refused(bad, match):
    with pytest.raises(WireError, match=match):
        decode_request(bad)
    with pytest.raises(WireError, match="unknown keys"):
        decode_settings({"max_new_tokens": 4, "eval": "x"})
