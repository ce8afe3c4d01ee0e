"""Tool schemas into the prompt through the checkpoint's own chat template (``tools=``).

Qwen's templates (Qwen2.5, Qwen3-VL, the tiny model's) render the schemas in the system turn, in the Hermes
block the model was trained on (``# Tools`` ... ``<tools>`` one JSON per line ``</tools>`` ... how to write a
``<tool_call>``). Some checkpoints' templates ignore ``tools`` (Qwen2-VL's and Qwen2.5-VL's as published, which
were written for no tools; InternVL's HF templates): rendered with and without them, the text is the same. The
schemas then go into the system turn as that same Hermes block, and the run says so once, so the model is never
asked to call tools it was not shown.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import ProcessorMixin

log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def hermes_block(tools: list[dict[str, Any]]) -> str:
    """Write the Hermes tool block Qwen's chat templates write into the system turn."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
        "\n</tool_call>"
    )


def render_with_tools(processor: ProcessorMixin, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """Render the prompt with ``tools`` shown: by the template when it renders them, else as the Hermes block in the
    system turn (module doc)."""
    plain = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    try:
        text = processor.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    # a template that refuses the argument renders no tools either
    except Exception:  # noqa: BLE001
        text = plain
    if text != plain:
        return text
    name = type(processor).__name__
    if name not in _WARNED:
        _WARNED.add(name)
        log.warning("the chat template of this %s renders no tools: their schemas go into the system turn", name)
    return processor.apply_chat_template(
        with_system_text(messages, hermes_block(tools)), add_generation_prompt=True, tokenize=False
    )


def with_system_text(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Return ``messages`` with ``text`` after the system turn's own (a system turn of ``text`` when there is none)."""
    if messages and messages[0].get("role") == "system":
        first = dict(messages[0])
        content = first.get("content")
        if isinstance(content, str):
            first["content"] = f"{content}\n\n{text}" if content else text
        else:
            first["content"] = [*(content or []), {"type": "text", "text": f"\n\n{text}"}]
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]
