"""Tools an environment offers the model, declared once: a name, a JSON schema of the arguments, a function.

``Tool`` is the record; the ``tool`` decorator builds one from a function or a method (the description is the
first line of its docstring unless given)::

    @tool(parameters={"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]})
    def square(x):
        '''Square a number.'''
        return str(x * x)

``Tool.schema()`` is the OpenAI / Qwen function record that chat templates take (``tools=``), so the model sees
the same schema that ``check_arguments`` enforces on its calls. A tool returns text, a PIL image, a list of
them, or a ``ToolOutput`` (text, images, ``done``); to refuse a call it raises ``ToolError`` (the model gets the
message as an observation). Arguments are validated with ``jsonschema`` when it is installed, else with the small
validator below, which covers the keywords tool schemas use: ``type``, ``enum``, ``const``, ``minimum`` /
``maximum`` (and the exclusive forms), ``minLength`` / ``maxLength``, ``minItems`` / ``maxItems``, ``items``,
``properties``, ``required``, ``additionalProperties``. Numbers must be finite; unknown arguments are refused
unless the schema sets ``additionalProperties: true`` (a made-up argument is the model's error).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

MAX_SCHEMA_ERRORS = 1  # the first problem is enough for the model to fix its call


class ToolError(ValueError):
    """A tool refuses its call (arguments the schema allows but the data does not: a box outside the image):
    the model reads the message as the observation, and the call counts as a bad call."""


@dataclass
class ToolOutput:
    """What a tool gives back: text, images (PIL; the engine fits them to the run's pixel budget) and whether
    the episode ends with this call."""

    text: str = ""
    images: list[Any] = field(default_factory=list)
    done: bool = False


@dataclass(frozen=True)
class Tool:
    """One tool: ``name``, ``description``, ``parameters`` (a JSON schema of an object) and ``function``,
    called with the validated arguments as keywords. Declared on a class (``@tool`` on a method), it binds
    to the instance like a method does."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]

    def __post_init__(self) -> None:
        if not self.name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"tool name {self.name!r}: letters, digits, '_' and '-' only")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON schema of type 'object'")

    def __get__(self, obj: Any, owner: type | None = None) -> Tool:
        """Return, on an instance, the tool with its function bound to it (so a method tool reads ``self``)."""
        if obj is None:
            return self
        return replace(self, function=functools.partial(self.function, obj))

    def schema(self) -> dict[str, Any]:
        """Return the function record chat templates render (``{"type": "function", "function": {...}}``)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __call__(self, **arguments: Any) -> Any:
        return self.function(**arguments)


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
) -> Any:
    """Declare ``function`` a ``Tool`` (``@tool`` or ``@tool(parameters=..., name=..., description=...)``);
    no ``parameters``: a tool without arguments."""

    def wrap(fn: Callable[..., Any]) -> Tool:
        doc = (fn.__doc__ or "").strip().splitlines()
        return Tool(
            name=name or fn.__name__,
            description=description if description is not None else (doc[0] if doc else ""),
            parameters=parameters or {"type": "object", "properties": {}},
            function=fn,
        )

    return wrap(function) if function is not None else wrap


def check_arguments(arguments: Any, schema: dict[str, Any]) -> str | None:
    """Say why ``arguments`` do not fit ``schema`` (one line), or None when they do."""
    problem = _check(arguments, schema, "arguments")
    if problem is not None:
        return problem
    try:
        import jsonschema  # optional: the full validator where it is installed
    except ImportError:
        return None
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(arguments))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path)
    return f"arguments{('.' + where) if where else ''}: {error.message[:200]}"


_TYPES: dict[str, Callable[[Any], bool]] = {
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _check(value: Any, schema: dict[str, Any], where: str) -> str | None:
    """Find the first problem of ``value`` against ``schema`` at ``where`` (the keywords of the module doc)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where}: {value} is not a finite number"
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_TYPES.get(t, lambda v: True)(value) for t in names):
            return f"{where}: expected {' or '.join(names)}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {str(value)[:60]!r} is not one of {schema['enum']}"
    if "const" in schema and value != schema["const"]:
        return f"{where}: must be {schema['const']!r}"
    if _TYPES["number"](value):
        return _check_number(value, schema, where)
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", math.inf):
            return f"{where}: a string of {len(value)} characters is outside its length limits"
    if isinstance(value, list):
        return _check_array(value, schema, where)
    if isinstance(value, dict):
        return _check_object(value, schema, where)
    return None


def _check_number(value: float, schema: dict[str, Any], where: str) -> str | None:
    bounds = (
        ("minimum", lambda v, b: v >= b, ">="),
        ("maximum", lambda v, b: v <= b, "<="),
        ("exclusiveMinimum", lambda v, b: v > b, ">"),
        ("exclusiveMaximum", lambda v, b: v < b, "<"),
    )
    for key, holds, sign in bounds:
        bound = schema.get(key)
        if isinstance(bound, (int, float)) and not holds(value, bound):
            return f"{where}: {value:g} must be {sign} {bound:g}"
    return None


def _check_array(value: list, schema: dict[str, Any], where: str) -> str | None:
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", math.inf):
        return f"{where}: {len(value)} items, outside [{schema.get('minItems', 0)}, {schema.get('maxItems', 'inf')}]"
    items = schema.get("items")
    if isinstance(items, dict):
        for k, item in enumerate(value):
            problem = _check(item, items, f"{where}[{k}]")
            if problem:
                return problem
    return None


def _check_object(value: dict, schema: dict[str, Any], where: str) -> str | None:
    properties = schema.get("properties") or {}
    missing = [k for k in schema.get("required", []) if k not in value]
    if missing:
        return f"{where}: missing {', '.join(map(str, missing))}"
    extra = schema.get("additionalProperties", False)
    for key, item in value.items():
        if key in properties:
            problem = _check(item, properties[key], f"{where}.{key}")
        elif extra is True:
            problem = None
        elif isinstance(extra, dict):
            problem = _check(item, extra, f"{where}.{key}")
        else:
            known = ", ".join(properties) or "none"
            problem = f"{where}: unknown argument {str(key)[:40]!r} (the tool takes: {known})"
        if problem:
            return problem
    return None
