"""Tool-call validity: does each call parse, name a known tool, and give arguments its schema accepts?

Tools are described the way chat templates already take them (OpenAI / Qwen function format)::

    {"name": "crop_video",
     "parameters": {"type": "object",
                    "properties": {"start": {"type": "number", "minimum": 0, "maximum": "$duration"},
                                   "end":   {"type": "number", "minimum": 0, "maximum": "$duration"}},
                    "required": ["start", "end"],
                    "x-increasing": [["start", "end"]]}}

(``{"type": "function", "function": {...}}`` wrappers are accepted too). The checked subset of JSON
Schema: ``type``, ``enum``, ``minimum`` / ``maximum``, ``minLength`` / ``maxLength``, ``required``,
``items`` (for arrays), and ``additionalProperties`` -- which defaults to *false* here, unlike JSON Schema:
an argument the tool does not define is a hallucination. Two extensions: a bound written ``"$column"``
is read from the sample's column (skipped when the sample lacks it), and ``x-increasing`` lists argument
pairs that must be strictly increasing (a window's start before its end).
"""

from __future__ import annotations

from typing import Any

from mmreason.parsing import all_tag_bodies, as_text, clip, finite_number
from mmreason.rewarding import column, per_sample, reward
from mmreason.rewards.format import parse_tool_call

MEDSCOPE_TOOLS: list[dict[str, Any]] = [
    {
        "name": "crop_video",
        "description": "Densely sampled frames of the window [start, end] seconds.",
        "parameters": {
            "type": "object",
            "properties": {
                "start": {"type": "number", "minimum": 0, "maximum": "$duration"},
                "end": {"type": "number", "minimum": 0, "maximum": "$duration"},
            },
            "required": ["start", "end"],
            "x-increasing": [["start", "end"]],
        },
    },
    {
        "name": "get_frame",
        "description": "The frames nearest to time t seconds.",
        "parameters": {
            "type": "object",
            "properties": {"t": {"type": "number", "minimum": 0, "maximum": "$duration"}},
            "required": ["t"],
        },
    },
]

_TYPES = {
    "number": lambda v: finite_number(v) is not None,  # a 400-digit integer is out of range, not an error
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def tool_table(tools: Any) -> dict[str, dict]:
    """``{name: parameters schema}`` from a list of tool descriptions."""
    table = {}
    for tool in tools or []:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            tool = tool["function"]
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            table[tool["name"]] = tool.get("parameters") or {"type": "object", "properties": {}}
    return table


def _bound(value: Any, columns: dict[str, Any]) -> float | None:
    if isinstance(value, str) and value.startswith("$"):
        value = columns.get(value[1:])
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def check_value(value: Any, schema: dict, columns: dict[str, Any], where: str) -> str | None:
    """None if ``value`` satisfies ``schema`` (the subset in the module doc), else the reason."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(_TYPES.get(k, lambda v: False)(value) for k in kinds):
        return f"{where}: expected {kind}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r} is not one of {schema['enum']}"
    if _TYPES["number"](value):
        low, high = _bound(schema.get("minimum"), columns), _bound(schema.get("maximum"), columns)
        if low is not None and value < low:
            return f"{where}: {value} < minimum {low}"
        if high is not None and value > high:
            return f"{where}: {value} > maximum {high}"
    if isinstance(value, str):
        if len(value) < int(schema.get("minLength", 0)) or len(value) > int(schema.get("maxLength", 10**9)):
            return f"{where}: string length {len(value)} out of range"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value[:256]):
            reason = check_value(item, schema["items"], columns, f"{where}[{i}]")
            if reason:
                return reason
    if isinstance(value, dict) and (kind == "object" or "properties" in schema):
        return check_object(value, schema, columns, where)
    return None


def check_object(arguments: dict, schema: dict, columns: dict[str, Any], where: str = "arguments") -> str | None:
    """None if the arguments dict satisfies the object schema, else the reason."""
    properties = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in arguments:
            return f"{where}: missing required {name!r}"
    if not schema.get("additionalProperties", False):
        extra = sorted(set(arguments) - set(properties))
        if extra:
            return f"{where}: unknown arguments {extra}"
    for name, value in arguments.items():
        if isinstance(properties.get(name), dict):
            reason = check_value(value, properties[name], columns, f"{where}.{name}")
            if reason:
                return reason
    for pair in schema.get("x-increasing") or []:
        a, b = (arguments.get(k) for k in pair)
        if _TYPES["number"](a) and _TYPES["number"](b) and not a < b:
            return f"{where}: {pair[0]}={a} must be < {pair[1]}={b}"
    return None


def check_call(call: dict | None, table: dict[str, dict], columns: dict[str, Any]) -> str | None:
    """None if the parsed call is valid, else the reason (None ``call`` = did not parse)."""
    if call is None:
        return "the call is not a JSON object with 'name' and 'arguments'"
    if call["name"] not in table:
        return f"unknown tool {call['name']!r} (known: {sorted(table)})"
    return check_object(call["arguments"], table[call["name"]], columns)


def calls_in(trajectory: Any, limit: int = 64) -> list[dict | None]:
    """Every ``<tool_call>`` body of the completion parsed (None where it does not parse); without
    tags, the rollout's recorded ``tool_calls``."""
    text = clip(as_text(trajectory.completion_text))
    bodies = all_tag_bodies(text, "tool_call", limit)
    if bodies:
        return [parse_tool_call(b) for b in bodies]
    recorded = []
    for call in (trajectory.tool_calls or [])[:limit]:
        ok = isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)
        recorded.append({"name": call["name"], "arguments": call["arguments"]} if ok else None)
    return recorded


@reward("tool_call_valid")
@per_sample
def tool_call_valid(sample, trajectory, *, tools: list | None = None, no_calls: float | None = None):
    """Fraction of tool calls that parse, name a known tool and have arguments in range (schema check).

    kwargs: ``tools`` (tool descriptions; default: the sample's ``tools`` column, else MedScope's
    ``crop_video`` / ``get_frame``); ``no_calls``: the value when there is no call (default None,
    "does not apply"). Columns: ``tools`` (optional), any column a ``"$column"`` bound names
    (``duration`` for the MedScope tools).
    """
    table = tool_table(tools if tools is not None else column(sample, "tools", MEDSCOPE_TOOLS))
    calls = calls_in(trajectory)
    if not calls:
        return no_calls
    columns = dict(sample.meta)
    columns.setdefault("answer", sample.answer)
    return sum(check_call(c, table, columns) is None for c in calls) / len(calls)
