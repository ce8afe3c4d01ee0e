"""Tool calls read from an assistant turn, in the tool-call format of the model's family; never evaluated.

The families this engine serves write calls the same way (``ModelFamily.tool_calls``):

- ``hermes`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL / Qwen3.5, and InternVL3 / 3.5, whose decoders are Qwen2.5 / Qwen3
  models and whose chat scaffolding is Qwen's): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one
  JSON object per tag, several tags for parallel calls. The name comes from NousResearch's Hermes function-calling
  format, which Qwen's chat templates render (``# Tools`` ... ``<tools>`` ... ``</tools>`` in the system turn).
  InternVL2.5's InternLM2 decoders wrote ``<|action_start|><|plugin|>`` JSON ``<|action_end|>`` instead: no
  adapter here serves those checkpoints.

Bounds (``CallLimits``): a turn over ``max_turn_chars`` is refused before anything is parsed; at most
``max_calls`` tags per turn; a call body over ``max_call_chars`` or nested deeper than ``max_depth`` is refused;
the body must be strict JSON (no ``NaN`` / ``Infinity``, no Python literals) holding a string ``name`` and an
object ``arguments`` (a JSON string holding an object is accepted too: some templates serialise it twice).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mmreason.parsing import nesting_depth, tag_tokens


@dataclass(frozen=True)
class CallFormat:
    """How a family writes a call: the tags around one JSON call."""

    name: str
    open_tag: str
    close_tag: str

    @property
    def tag(self) -> str:
        return self.open_tag.strip("<>")


HERMES = CallFormat("hermes", "<tool_call>", "</tool_call>")
FORMATS: dict[str, CallFormat] = {HERMES.name: HERMES}


@dataclass(frozen=True)
class CallLimits:
    """How much of a turn is read as calls (each bound keeps hostile output small)."""

    max_turn_chars: int = 20_000  # (0, inf): a longer turn is refused unread
    max_calls: int = 1  # [1, inf): tool-call tags per turn
    max_call_chars: int = 4_000  # (0, inf): characters of one call's JSON
    max_depth: int = 8  # [1, inf): bracket nesting of one call's JSON


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's name and its arguments (untrusted until ``check_arguments`` passes)."""

    name: str
    arguments: dict[str, Any]


class CallFormatError(ValueError):
    """A turn's calls cannot be read (the message says why, for the model's next observation)."""


def _no_constants(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def _strict_json(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constants)


def parse_calls(text: str, fmt: CallFormat = HERMES, limits: CallLimits = CallLimits()) -> list[ToolCall]:
    """Parse the calls written in ``text`` (empty: the turn calls nothing); ``CallFormatError`` naming the first problem
    when a call is malformed, unbalanced, too big or too many (module doc)."""
    if len(text) > limits.max_turn_chars:
        raise CallFormatError(f"a turn of {len(text)} characters is over the limit of {limits.max_turn_chars}")
    bodies, open_at = [], None
    for start, end, _, closing in tag_tokens(text, (fmt.tag,)):
        if not closing:
            if open_at is not None:
                raise CallFormatError(f"{fmt.open_tag} opened again before {fmt.close_tag}")
            open_at = end
        else:
            if open_at is None:
                raise CallFormatError(f"{fmt.close_tag} without its {fmt.open_tag}")
            bodies.append(text[open_at:start])
            open_at = None
        if len(bodies) > limits.max_calls:
            raise CallFormatError(f"at most {limits.max_calls} tool call(s) per turn")
    if open_at is not None:
        raise CallFormatError(f"{fmt.open_tag} is never closed")
    return [_one_call(body.strip(), fmt, limits) for body in bodies]


def _one_call(body: str, fmt: CallFormat, limits: CallLimits) -> ToolCall:
    if len(body) > limits.max_call_chars:
        raise CallFormatError(f"a call of {len(body)} characters is over the limit of {limits.max_call_chars}")
    if nesting_depth(body) > limits.max_depth:
        raise CallFormatError(f"a call nested deeper than {limits.max_depth} levels")
    try:
        call = _strict_json(body)
    except (ValueError, RecursionError) as exc:
        raise CallFormatError(f"the call is not JSON ({str(exc)[:80]})") from None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise CallFormatError(f'a call is a JSON object {{"name": ..., "arguments": {{...}}}} inside {fmt.open_tag}')
    unknown = sorted(set(call) - {"name", "arguments"})
    if unknown:
        raise CallFormatError(f"a call has only name and arguments, not {', '.join(unknown)[:80]}")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = _strict_json(arguments)
        except (ValueError, RecursionError):
            arguments = None
    if not isinstance(arguments, dict):
        raise CallFormatError(f"the arguments of {call['name'][:40]!r} are not a JSON object")
    return ToolCall(call["name"][:64], arguments)
