"""The tiny model is a real checkpoint: it loads through the Auto classes and generates from images,
a video and PDF pages; the same seed gives the same bytes."""

from __future__ import annotations

import hashlib

import pytest
import torch
from PIL import Image, ImageDraw

from mmreason.models.tiny import build_tiny_model


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_loads_through_auto_classes(tiny_model_dir):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert type(processor).__name__ == "Qwen2_5_VLProcessor"
    n = sum(p.numel() for p in model.parameters())
    assert 200_000 <= n <= 2_000_000
    tok = processor.tokenizer
    for special in ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|image_pad|>", "<|video_pad|>"):
        assert tok.convert_tokens_to_ids(special) != tok.unk_token_id
        assert len(tok.tokenize(special)) == 1
    # The chat template renders vision placeholders and the empty thought survives a round trip.
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Hi"}]}]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert "<|vision_start|><|image_pad|><|vision_end|>Hi<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")
    empty = "<think>\n\n</think><answer>yes</answer>"
    assert tok.decode(tok(empty)["input_ids"]) == empty


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a = build_tiny_model(tmp_path / "a", seed=5)
    b = build_tiny_model(tmp_path / "b", seed=5)
    c = build_tiny_model(tmp_path / "c", seed=6)
    assert _sha(a / "model.safetensors") == _sha(b / "model.safetensors")
    assert _sha(a / "tokenizer.json") == _sha(b / "tokenizer.json")
    assert _sha(a / "model.safetensors") != _sha(c / "model.safetensors")


def test_qwen2_vl_arch_builds_and_loads(tmp_path):
    from transformers import AutoModelForImageTextToText

    path = build_tiny_model(tmp_path / "q2", seed=0, arch="qwen2_vl")
    model = AutoModelForImageTextToText.from_pretrained(path)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"


def test_base_size_is_a_larger_qwen2_5_vl_with_vllm_head_sizes(tmp_path):
    """--size base: a few million parameters (more than small's), head size 64 in text and vision (vLLM's CPU
    attention takes 32, 64, 80, 96, 112, 128, ...), and it generates from an image."""
    import json

    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = build_tiny_model(tmp_path / "base", seed=0, size="base")
    config = json.loads((path / "config.json").read_text())
    text, vision = config["text_config"], config["vision_config"]
    assert text["hidden_size"] // text["num_attention_heads"] == 64
    assert vision["hidden_size"] // vision["num_heads"] == 64
    model = AutoModelForImageTextToText.from_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    assert 5_000_000 <= n <= 30_000_000 and json.loads((path / "mmreason_tiny.json").read_text())["size"] == "base"
    _generate(
        model,
        AutoProcessor.from_pretrained(path),
        [{"type": "image"}, {"type": "text", "text": "Colour?"}],
        images=[Image.new("RGB", (56, 56), "red")],
    )


def _generate(model, processor, content, images=None, videos=None, video_metadata=None):
    msgs = [{"role": "user", "content": content}]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    kwargs = {"text": [text], "return_tensors": "pt"}
    if images:
        kwargs["images"] = images
    if videos:
        kwargs.update(videos=videos, video_metadata=video_metadata, do_sample_frames=False)
    inputs = processor(**kwargs)
    torch.manual_seed(0)
    out = model.generate(**inputs, max_new_tokens=5, do_sample=True)
    assert out.shape[1] > inputs["input_ids"].shape[1]  # it produced tokens
    return inputs


def test_generates_from_one_and_three_images(tiny):
    model, processor = tiny
    one = _generate(
        model,
        processor,
        [{"type": "image"}, {"type": "text", "text": "Colour?"}],
        images=[Image.new("RGB", (80, 60), "red")],
    )
    assert one["image_grid_thw"].shape[0] == 1
    imgs = [Image.new("RGB", s, c) for s, c in (((80, 60), "red"), ((30, 200), "blue"), ((120, 120), "green"))]
    three = _generate(model, processor, [{"type": "image"}] * 3 + [{"type": "text", "text": "Which?"}], images=imgs)
    assert three["image_grid_thw"].shape[0] == 3


def test_generates_from_an_8_frame_video(tiny, tmp_path):
    import av

    from mmreason.media import load_video, video_metadata

    path = tmp_path / "clip.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=8)
        stream.width, stream.height, stream.pix_fmt = 96, 64, "yuv420p"
        for i in range(16):
            img = Image.new("RGB", (96, 64), (i * 15, 80, 200 - i * 10))
            frame = av.VideoFrame.from_image(img)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    model, processor = tiny
    clip = load_video(path, num_frames=8)
    assert clip.frames.shape[0] == 8
    inputs = _generate(
        model,
        processor,
        [{"type": "video"}, {"type": "text", "text": "What happens?"}],
        videos=[clip.frames],
        video_metadata=[video_metadata(clip)],
    )
    assert inputs["video_grid_thw"][0, 0] == 4  # 8 frames / temporal patch 2


def test_generates_from_two_pdf_pages(tiny, tmp_path):
    from mmreason.media import render_pages

    pages = []
    for i in range(2):
        page = Image.new("RGB", (300, 400), "white")
        ImageDraw.Draw(page).text((20, 20), f"Page {i + 1}: total = {i * 7}", fill="black")
        pages.append(page)
    pdf = tmp_path / "doc.pdf"
    pages[0].save(pdf, "PDF", save_all=True, append_images=pages[1:])
    rendered = render_pages(pdf, pages=[0, 1], dpi=50)
    assert len(rendered) == 2
    model, processor = tiny
    content = [
        {"type": "text", "text": "Page 1:"},
        {"type": "image"},
        {"type": "text", "text": "Page 2:"},
        {"type": "image"},
        {"type": "text", "text": "What is the total?"},
    ]
    inputs = _generate(model, processor, content, images=rendered)
    assert inputs["image_grid_thw"].shape[0] == 2


@pytest.mark.parametrize("cmd", [["tiny-model", "--help"]])
def test_cli_help_runs(cmd, capsys):
    from mmreason.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(cmd)
    assert exit_info.value.code == 0
    assert "--seed" in capsys.readouterr().out
