"""``ToolEnvironment``: the environment protocol (``reset`` / ``step``) for an environment made of tools.

Subclass it, declare tools as methods with ``@tool`` (``mmreason.rollout.tools``), and read the row in ``setup``::

    class Zoom(ToolEnvironment):
        def setup(self, sample):
            self.image = load_image(sample.images[0])

        @tool(parameters={...})
        def zoom(self, box):
            '''Crop the image to box = [x0, y0, x1, y1] (fractions of its width and height).'''
            return self.image.crop(...)

After each assistant turn ``step(text)`` reads the turn's calls in the family's format (``tool_calls.py``,
bounded), checks each against its tool's schema, and runs it. A turn without a call ends the episode (the model
answered). A turn whose call cannot be read, names an unknown tool, breaks the schema, is refused by the tool
(``ToolError``) or comes after the budget of ``max_tool_calls`` is spent gets an error observation saying what was
wrong (``info["error"]``: a counted bad call, ``env/bad_tool_calls``), and after ``max_errors`` of those the
episode ends. Any other exception inside a tool is the environment's fault: the rollout engine ends the episode
and counts it (``count/env_faults``), never the run. ``info`` of a call that ran holds its ``name``,
``arguments`` and the number of ``images`` it returned: facts for rewards.
"""

from __future__ import annotations

from typing import Any

from mmreason.rollout.environment import Observation
from mmreason.rollout.tool_calls import HERMES, CallFormat, CallFormatError, CallLimits, ToolCall, parse_calls
from mmreason.rollout.tools import Tool, ToolError, ToolOutput, check_arguments
from mmreason.types import Sample


class ToolEnvironment:
    """An environment whose actions are tool calls (module doc). Class attributes are its limits."""

    stop_strings: tuple[str, ...] = ("</tool_call>",)  # a turn that calls a tool stops there for the answer
    # calls that run per episode; past it a call is a bad call ("answer now")
    max_tool_calls: int = 4
    max_errors: int = 3  # bad calls before the episode ends
    max_images: int = 4  # images one call may return
    max_text_chars: int = 2_000  # a tool's text is cut to this
    call_limits: CallLimits = CallLimits()
    # the engine sets the model family's (ModelFamily.tool_calls)
    call_format: CallFormat = HERMES

    def tools(self) -> list[Tool]:
        """Return the tools declared on the class (``@tool`` methods), bound to this instance, in declaration order."""
        seen: dict[str, Tool] = {}
        for cls in reversed(type(self).__mro__):
            for key, value in vars(cls).items():
                if isinstance(value, Tool):
                    seen[key] = getattr(self, key)
        return list(seen.values())

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Return the tools as the chat template takes them (``tools=``)."""
        return [t.schema() for t in self.tools()]

    @property
    def max_turns(self) -> int:
        """Count the assistant turns an episode needs at most: every call, then the answer."""
        return self.max_tool_calls + 1

    # ---- the protocol ------------------------------------------------------------------------------

    def reset(self, sample: Sample) -> None:
        self.sample = sample
        self.calls = self.errors = 0
        self._table = {t.name: t for t in self.tools()}
        self.setup(sample)

    def setup(self, sample: Sample) -> None:
        """Read what the tools need from the row (its image, its columns); raising here skips the sample."""

    def step(self, action_text: str) -> Observation:
        try:
            calls = parse_calls(action_text, self.call_format, self.call_limits)
        except CallFormatError as exc:
            return self.bad_call(str(exc))
        if not calls:
            return Observation(done=True, info={"end": "no tool call"})
        texts: list[str] = []
        images: list[Any] = []
        done = False
        for call in calls:
            problem = self._problem(call)
            if problem is not None:
                return self.bad_call(problem, call.name)
            try:
                out = as_output(self._table[call.name](**call.arguments), call.name, self.max_images)
            except ToolError as exc:
                return self.bad_call(str(exc), call.name)
            self.calls += 1
            texts.append(out.text[: self.max_text_chars])
            images += out.images
            done = done or out.done
        last = calls[-1]
        info = {"name": last.name, "arguments": last.arguments, "images": len(images), "calls": len(calls)}
        text = "\n".join(f"<tool_response>\n{t}\n</tool_response>" for t in texts)
        return Observation(text=text, images=images, done=done, info=info)

    def bad_call(self, message: str, name: str | None = None) -> Observation:
        """Build the observation of a call that did not run: what was wrong, and how to call (a counted bad call)."""
        self.errors += 1
        info = {"error": message[:300], **({"tool": name[:64]} if name else {})}
        hint = f'Call a tool as {self.call_format.open_tag}{{"name": ..., "arguments": {{...}}}}'
        hint += f"{self.call_format.close_tag} with one of: {', '.join(self._table) or 'none'}; or answer."
        return Observation(text=f"Error: {message[:300]}. {hint}", info=info, done=self.errors >= self.max_errors)

    def _problem(self, call: ToolCall) -> str | None:
        tool = self._table.get(call.name)
        if tool is None:
            return f"unknown tool {call.name[:40]!r}"
        if self.calls >= self.max_tool_calls:
            return f"the budget of {self.max_tool_calls} tool calls is spent; answer now"
        problem = check_arguments(call.arguments, tool.parameters)
        return None if problem is None else f"{call.name}: {problem}"


def as_output(value: Any, name: str, max_images: int) -> ToolOutput:
    """Return what a tool returned as a ``ToolOutput``; a value of another kind is the tool's bug (``TypeError``, a
    counted environment fault)."""
    from PIL import Image

    if isinstance(value, ToolOutput):
        out = value
    elif isinstance(value, str):
        out = ToolOutput(text=value)
    elif isinstance(value, Image.Image):
        out = ToolOutput(images=[value])
    elif isinstance(value, (list, tuple)):
        out = ToolOutput(
            text="\n".join(v for v in value if isinstance(v, str)),
            images=[v for v in value if not isinstance(v, str)],
        )
    else:
        raise TypeError(f"tool {name!r} returned a {type(value).__name__}; return text, images or a ToolOutput")
    bad = [type(i).__name__ for i in out.images if not isinstance(i, Image.Image)]
    if bad:
        raise TypeError(f"tool {name!r} returned images of type {', '.join(bad)}; return PIL images")
    if len(out.images) > max_images:
        raise TypeError(f"tool {name!r} returned {len(out.images)} images, over max_images={max_images}")
    if not isinstance(out.text, str):
        raise TypeError(f"tool {name!r} returned text of type {type(out.text).__name__}")
    return out
