"""Turn delimiters come from the chat template: Qwen's exact text on the tiny checkpoint, another
template's own text elsewhere, and a clear error when a template cannot show them."""

from __future__ import annotations

import jinja2
import pytest

from mmreason.rollout.chat_turns import next_turn, turn_end

PARTS = [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "t=3.0 s"}]


def test_qwen_template_gives_the_qwen_turn_text(tiny):
    _, processor = tiny
    body = (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|>"
        "t=3.0 s<|im_end|>\n<|im_start|>assistant\n"
    )
    assert turn_end(processor) == "<|im_end|>\n"
    assert next_turn(processor, PARTS, closed=False, eos_text="<|im_end|>") == "<|im_end|>\n" + body
    assert next_turn(processor, PARTS, closed=True, eos_text="<|im_end|>") == "\n" + body  # eos already sampled


class _Template:
    """A stand-in processor with another chat format."""

    def __init__(self, source: str):
        self.template = jinja2.Environment().from_string(source)

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt)


PLAIN = (
    "{% for m in messages %}### {{ m.role }}: {% if m.content is string %}{{ m.content }}"
    "{% else %}{% for c in m.content %}{% if c.type == 'image' %}[IMG]{% else %}{{ c.text }}{% endif %}"
    "{% endfor %}{% endif %}</s>\n{% endfor %}{% if add_generation_prompt %}### assistant: {% endif %}"
)


def test_another_template_gives_its_own_turn_text():
    owner = _Template(PLAIN)
    assert turn_end(owner) == "</s>\n"
    got = next_turn(owner, [{"type": "image"}, {"type": "text", "text": "seen"}], closed=True, eos_text="</s>")
    assert got == "\n### user: [IMG]seen</s>\n### assistant: "


def test_a_template_that_drops_assistant_content_is_a_clear_error():
    owner = _Template("{% for m in messages %}{{ m.role }}\n{% endfor %}")
    with pytest.raises(ValueError, match="drops assistant content"):
        turn_end(owner)
