"""Turn delimiters read from the checkpoint's chat template, never spelled out in code.

A multi-turn rollout appends an observation after the model's own tokens, and SFT ends its target where an
assistant turn ends. Both need the exact text the chat template puts between turns (for Qwen:
``<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``). It is found by rendering a
probe conversation whose assistant content is a marker and keeping what follows the marker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import ProcessorMixin

_MARK = "\u2063mmreason-turn\u2063"  # invisible separator: never part of a real template


def _render_after_mark(
    template_owner: ProcessorMixin, messages: list[dict[str, Any]], add_generation_prompt: bool
) -> str:
    try:
        text = template_owner.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)
    # no template, or one that refuses the probe: say which and why
    except Exception as exc:
        raise ValueError(f"the checkpoint's chat template cannot render a multi-turn conversation: {exc}") from exc
    if isinstance(text, list):  # processors may return one string per conversation
        text = text[0]
    if _MARK not in text:
        raise ValueError("the checkpoint's chat template drops assistant content; turn delimiters cannot be read")
    return text[text.index(_MARK) + len(_MARK) :]


def turn_end(processor: ProcessorMixin) -> str:
    """Return what closes an assistant turn (``<|im_end|>\\n`` for Qwen)."""
    return _render_after_mark(processor, [{"role": "assistant", "content": _MARK}], add_generation_prompt=False)


def next_turn(
    processor: ProcessorMixin, content: list[dict[str, Any]], closed: bool, eos_text: str = "", role: str = "user"
) -> str:
    """Return the text from the end of an assistant turn's content to the start of the next assistant turn, with a
    ``role`` turn holding ``content`` (chat-template content parts: ``{"type": "image"}``, ``{"type": "video"}``,
    ``{"type": "text", "text": ...}``) in between. ``closed``: the model already emitted ``eos_text`` (its turn-end
    token), so it is not repeated."""
    text = _render_after_mark(
        processor,
        [{"role": "assistant", "content": _MARK}, {"role": role, "content": content}],
        add_generation_prompt=True,
    )
    if closed and eos_text and text.startswith(eos_text):
        text = text[len(eos_text) :]
    return text
