"""Jinja templates from files the user names (a ``.jinja`` prompt template, a judge's prompt): rendered in
Jinja's sandbox, within a time and a size bound, so a template can neither reach Python's internals nor take
the run's memory or time.

- ``ImmutableSandboxedEnvironment``: no ``__globals__``, ``__class__`` or other private attribute, no method
  that changes a list or dict; only the globals ``range`` (the sandbox's, at most 100,000 items) and
  ``namespace``, and the filters in ``FILTERS``;
- size: a call, a filter, ``*`` or ``**`` that could build more than ``WORK_FACTOR`` x ``max_chars`` is
  refused before it runs (from its operands' sizes: ``weight``), every value a call, an attribute or an item
  gives is at most ``max_chars`` characters / items, and the output is streamed and stops past ``max_chars``
  characters (``TemplateLimit``);
- time: one watchdog thread raises ``TemplateLimit`` inside a render still running after ``timeout_s``
  seconds (a template is Python code once compiled, so it stops at its next bytecode).

A template error (syntax, an undefined variable, a limit) is ``TemplateLimit`` or jinja2's own error; callers
turn either into one line naming the template.
"""

from __future__ import annotations

import ctypes
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jinja2 import Environment, Template
    from jinja2.runtime import Context

MAX_TEMPLATE_BYTES = 1 << 20  # a template file
MAX_CHARS = 1_000_000  # a rendered template, and any value inside one (characters + items)
WORK_FACTOR = 16  # a call or filter may build at most this many times MAX_CHARS (estimated before it runs)
TIMEOUT_S = 5.0  # one render
FILTERS = (
    "trim", "upper", "lower", "title", "capitalize", "replace", "default", "d", "length", "count", "first",
    "last", "join", "string", "int", "float", "abs", "round", "truncate", "wordcount", "striptags", "escape",
    "e", "list", "reverse", "sort", "unique", "center", "wordwrap", "batch", "slice", "min", "max", "sum",
    "tojson", "attr", "dictsort", "items",
)  # fmt: skip


class TemplateLimit(ValueError):
    """A template that went past a bound (time, size) or reached for what the sandbox refuses."""


def weight(value: Any, limit: int) -> int:
    """What ``value`` may cost to build on: a string's length, a container's items and its strings' and
    containers' weights (one pass, stopped past ``limit``), an integer argument's size (a width, a count)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return min(abs(value), limit + 1)
    return _inner(value, limit)


def _inner(value: Any, limit: int) -> int:
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)):
        total = len(value)
        for item in value:
            if total > limit:
                break
            total += _inner(item, limit - total)
        return total
    return 0


def _check(value: Any, max_chars: int) -> Any:
    """``value`` when its weight is within ``max_chars`` (integers are never refused here)."""
    if not isinstance(value, int) and weight(value, max_chars) > max_chars:
        raise TemplateLimit(f"a value over the bound of {max_chars:,} characters / items")
    return value


def _before(what: str, target: Any, args: tuple, max_chars: int) -> None:
    """Refuse a call whose result could pass ``WORK_FACTOR * max_chars``: (its target's weight + 1) x (1 + its
    arguments' weights) bounds what any string or list method or filter builds."""
    most = WORK_FACTOR * max_chars
    estimate = (weight(target, most) + 1) * (1 + sum(weight(a, most) for a in args))
    if estimate > most:
        raise TemplateLimit(f"{what} could build {estimate:,} characters / items, over {most:,}")


def environment(*, strict: bool = True, max_chars: int = MAX_CHARS) -> Environment:
    """A sandboxed Jinja environment within the module's bounds (``strict``: an undefined variable is an
    error, else it renders empty)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**", "+"})

        def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(left, int) and isinstance(right, int):
                if abs(left) > 1 and right > 0 and right * abs(left).bit_length() > 4096:
                    raise TemplateLimit(f"{left} ** {right}: a number over 4096 bits")
            elif operator == "*" and not (isinstance(left, (int, float)) and isinstance(right, (int, float))):
                _before("'*'", left, (right,), max_chars)
            elif operator == "+":
                _check(left, max_chars), _check(right, max_chars)
            return _check(super().call_binop(context, operator, left, right), max_chars)

        def getattr(self, obj: Any, attribute: str) -> Any:
            return _check(super().getattr(obj, attribute), max_chars)

        def getitem(self, obj: Any, argument: str | Any) -> Any:
            return _check(super().getitem(obj, argument), max_chars)

        def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja2's
            _before("a call", getattr(__obj, "__self__", None), (*args, *kwargs.values()), max_chars)
            return _check(super().call(__context, __obj, *args, **kwargs), max_chars)

    env = Bounded(
        undefined=jinja2.StrictUndefined if strict else jinja2.Undefined,
        autoescape=False,
        keep_trailing_newline=False,
    )
    env.filters = {name: _bounded_filter(name, env.filters[name], max_chars) for name in FILTERS}
    env.globals = {"range": env.globals["range"], "namespace": env.globals["namespace"]}
    return env


def _bounded_filter(name: str, fn: Callable, max_chars: int) -> Callable:
    """The filter ``fn`` refused before it runs when it could build too much (``_before``), its value
    checked after."""
    from jinja2.utils import _PassArg

    skip = 2 if _PassArg.from_obj(fn) is not None else 1  # the context / environment, then the value

    def bounded(*args: Any, **kwargs: Any) -> Any:
        _before(
            f"filter {name}", args[skip - 1] if len(args) >= skip else None, (*args[skip:], *kwargs.values()), max_chars
        )
        return _check(fn(*args, **kwargs), max_chars)

    if hasattr(fn, "jinja_pass_arg"):
        bounded.jinja_pass_arg = fn.jinja_pass_arg  # type: ignore[attr-defined]
    bounded.__name__ = name
    return bounded


def compile_template(source: str, *, strict: bool = True, max_chars: int = MAX_CHARS) -> Template:
    """``source`` compiled in a bounded sandbox (``environment``); jinja2's ``TemplateSyntaxError`` as is."""
    if len(source.encode("utf-8", "surrogatepass")) > MAX_TEMPLATE_BYTES:
        raise TemplateLimit(f"a template of {len(source):,} characters, over {MAX_TEMPLATE_BYTES:,} bytes")
    return environment(strict=strict, max_chars=max_chars).from_string(source)


def render(
    template: Template, values: dict[str, Any], *, timeout_s: float | None = None, max_chars: int = MAX_CHARS
) -> str:
    """``template`` (from ``compile_template``) rendered with ``values``, streamed: ``TemplateLimit`` past
    ``max_chars`` characters of output or ``timeout_s`` seconds (default ``TIMEOUT_S``)."""
    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    ticket = _WATCHDOG.arm(timeout_s)
    try:
        try:
            parts, total = [], 0
            for piece in template.generate(**values):
                total += len(piece)
                if total > max_chars:
                    raise TemplateLimit(f"its output passed {max_chars:,} characters")
                parts.append(piece)
        finally:
            fired = _WATCHDOG.disarm(ticket)
    except _Expired:
        fired = True
    except RecursionError:
        raise TemplateLimit("it recursed too deep") from None
    if fired:
        raise TemplateLimit(f"it ran past {timeout_s:g} s")
    return "".join(parts)


class _Expired(BaseException):
    """Raised by the watchdog inside a render that ran past its time (a BaseException: no template or
    filter catches it)."""


class _Watchdog:
    """One daemon thread for every render: ``arm`` gives a ticket with a deadline; past it the render's
    thread gets ``_Expired`` at its next bytecode; ``disarm`` removes the ticket, clears an exception that was
    set but not yet raised, and says whether the deadline fired."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, int] = {}  # ticket -> thread ident
        self._fired: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, timeout_s: float) -> int:
        with self._cond:
            ticket = next(self._ids)
            self._live[ticket] = threading.get_ident()
            heapq.heappush(self._heap, (time.monotonic() + timeout_s, ticket))
            if self._thread is None:
                # not named mmreason-*: an idle daemon for the process's life, never a run's worker to join at
                # its end (parallel/shutdown.py: each run waited 5 s for it, then exited without finalization)
                self._thread = threading.Thread(target=self._run, name="template-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
            return ticket

    def disarm(self, ticket: int) -> bool:
        with self._cond:
            self._live.pop(ticket, None)
            fired = ticket in self._fired
            self._fired.discard(ticket)
            if fired:  # set but perhaps not raised yet: it must not land outside the render
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)
            return fired

    def _run(self) -> None:
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._live:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, ticket = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                ident = self._live.pop(ticket)
                self._fired.add(ticket)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(_Expired))


_WATCHDOG = _Watchdog()
