"""One processor call per batch gives each doc exactly the prompt ``build_prompt`` gives it alone."""

from __future__ import annotations

import av
import numpy as np
import pytest
import torch
from PIL import Image

from mmreason.eval.prompts import build_one, encode_batch
from mmreason.eval.scoring import SAMPLE_ERRORS, PromptOptions
from mmreason.media import MediaError
from mmreason.rollout.prompts import PromptTooLong
from mmreason.types import PageRef, Sample, VideoRef


def write_mp4(path, frames: int = 12, size=(64, 48)):
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=6)
        stream.width, stream.height, stream.pix_fmt = size[0], size[1], "yuv420p"
        for i in range(frames):
            pixels = np.full((size[1], size[0], 3), 20 * i, np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")))
        container.mux(stream.encode())
    return path


def _doc(i: int, n_images=0, size=(64, 64), videos=(), pages=(), text="What is shown?") -> Sample:
    content = [{"type": "image"}] * (n_images + len(pages)) + [{"type": "video"}] * len(videos)
    images = [Image.new("RGB", size, (30 * i % 255, 90, 200)) for _ in range(n_images)]
    return Sample(
        id=f"d{i}",
        messages=[{"role": "user", "content": [*content, {"type": "text", "text": text}]}],
        images=images,
        videos=list(videos),
        pages=list(pages),
    )


@pytest.fixture
def docs(tmp_path):
    video = write_mp4(tmp_path / "clip.mp4")
    pdf = tmp_path / "doc.pdf"
    Image.new("RGB", (200, 260), "white").save(
        pdf, "PDF", save_all=True, append_images=[Image.new("RGB", (260, 200), "gray")]
    )
    return [
        _doc(0, 1, (60, 90)),
        _doc(1, 2, (200, 120), text="Compare the two pictures in detail."),
        _doc(2, 0, text="No picture at all here."),
        _doc(3, 0, videos=[VideoRef(str(video), num_frames=4)]),
        _doc(4, 1, (28, 300), pages=[PageRef(str(pdf), 1)]),
        _doc(5, 0, pages=[PageRef(str(tmp_path / "gone.pdf"), 0)]),  # missing file
        _doc(6, 6, (300, 300)),  # the long one
        _doc(7, 0, videos=[VideoRef(str(video), start=0.5, end=1.5, fps=2.0)], text="When does it get brighter?"),
    ]


def _same(a, b) -> None:
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.mm_token_type_ids, b.mm_token_type_ids)
    assert a.text == b.text and sorted(a.visual) == sorted(b.visual)
    for key in a.visual:
        assert torch.equal(a.visual[key], b.visual[key]), key


def test_batch_call_equals_each_doc_alone(tiny, docs):
    processor = tiny[1]
    opts = PromptOptions(max_pixels=200 * 28 * 28, max_prompt_length=4096)
    got = encode_batch(processor, docs, opts, SAMPLE_ERRORS)
    for doc, result in zip(docs, got):
        if doc.id == "d5":
            assert isinstance(result, MediaError) and "gone.pdf" in str(result)
            continue
        _same(result, build_one(processor, doc, opts))
    assert got[3].visual["video_grid_thw"].shape[0] == 1 and got[1].visual["image_grid_thw"].shape[0] == 2


def test_over_long_prompts_fail_or_downscale_alone(tiny, docs):
    processor = tiny[1]
    loose = PromptOptions(max_pixels=200 * 28 * 28)
    lengths = [r.length for r in encode_batch(processor, docs, loose, SAMPLE_ERRORS) if not isinstance(r, Exception)]
    limit = sorted(lengths)[-2]  # all but the longest fit
    strict = PromptOptions(max_pixels=200 * 28 * 28, max_prompt_length=limit)
    got = encode_batch(processor, docs, strict, SAMPLE_ERRORS)
    assert isinstance(got[6], PromptTooLong) and "'d6'" in str(got[6])
    assert all(not isinstance(r, Exception) for i, r in enumerate(got) if i not in (5, 6))
    shrink = PromptOptions(max_pixels=200 * 28 * 28, max_prompt_length=limit, overflow="downscale")
    got = encode_batch(processor, docs, shrink, SAMPLE_ERRORS)
    assert got[6].length <= limit
    _same(got[6], build_one(processor, docs[6], shrink))
