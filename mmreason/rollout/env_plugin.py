"""A user's environment attached to any task pack: ``rollout.environment: pkg.module:Factory`` or
``path/file.py:Factory`` with ``rollout.environment_args`` (training), ``--environment`` / ``--environment_args``
(``mmreason eval``).

``Factory`` is a class or a function; ``Factory(**environment_args)`` must return a fresh environment (``reset``,
``step``, ``stop_strings``: ``mmreason.rollout.environment``) each time: one per episode. One is built when the
run starts, so a wrong reference or argument is a one-line error naming the key before the model loads. An
environment with tools (``tool_schemas()``, as ``ToolEnvironment`` has) gets them into every prompt through the
chat template (``Sample.tools``), and calls written in the model family's format (``call_format``).
"""

from __future__ import annotations

import dataclasses
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mmreason.references import resolve_reference
from mmreason.rollout.env_client import HttpEnvironment, http_environment
from mmreason.rollout.tool_calls import FORMATS, HERMES, CallFormat
from mmreason.taskpack import TaskPack
from mmreason.types import Sample

if TYPE_CHECKING:
    from mmreason.rollout.environment import Environment


class EnvironmentConfigError(ValueError):
    """The environment reference or its arguments are wrong (the message names the key)."""


@dataclass
class EnvironmentFactory:
    """Builds one environment per episode: ``factory(**args)``, its call format set to the model family's."""

    ref: str
    factory: Any
    args: dict[str, Any] = field(default_factory=dict)
    call_format: CallFormat = HERMES

    def __call__(self) -> Environment:
        env = self.factory(**self.args)
        if hasattr(env, "call_format"):
            env.call_format = self.call_format
        return env

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Return the schemas an environment of this factory shows the model (none for an environment without tools)."""
        schemas = getattr(self(), "tool_schemas", None)
        return list(schemas()) if callable(schemas) else []


def load_environment(
    ref: str,
    args: dict[str, Any] | None = None,
    *,
    base_dir: str | None = None,
    tool_calls: str = "hermes",
    key: str = "rollout.environment",
) -> EnvironmentFactory:
    """Load the factory ``ref`` names, checked by building one environment (module doc); errors name ``key``."""
    args = dict(args or {})
    # a served environment (`mmreason env-serve`): args are the client's
    if ref.startswith(("http://", "https://")):
        factory, args = _served(ref, args, key), {}
    else:
        try:
            factory = resolve_reference(ref, "environment", base_dir)
        except (ValueError, TypeError, AttributeError, ImportError, FileNotFoundError) as exc:
            raise EnvironmentConfigError(f"{key}: {exc}") from None
    try:
        inspect.signature(factory).bind(**args)
    except TypeError as exc:
        raise EnvironmentConfigError(f"{key}_args: {ref} does not take {sorted(args)}: {exc}") from None
    except ValueError:  # a builtin without a signature: the call below says it
        pass
    made = EnvironmentFactory(ref, factory, args, FORMATS[tool_calls])
    try:
        env = made()
    # any failure to build is the user's configuration
    except Exception as exc:  # noqa: BLE001
        raise EnvironmentConfigError(f"{key}: {ref}(**{key}_args) raised {type(exc).__name__}: {exc}") from exc
    missing = [name for name in ("reset", "step") if not callable(getattr(env, name, None))]
    if missing:
        raise EnvironmentConfigError(
            f"{key}: {ref} built a {type(env).__name__} without {' / '.join(missing)} "
            "(an environment has reset(sample) and step(text) -> Observation)"
        )
    if not isinstance(getattr(env, "stop_strings", ()), (tuple, list)):
        raise EnvironmentConfigError(f"{key}: {ref}'s stop_strings must be a tuple of strings")
    return made


def _served(url: str, args: dict[str, Any], key: str) -> Callable[[], HttpEnvironment]:
    """Build the client factory of the environment served at ``url`` (``rollout.environment_args``: api_key, timeout_s,
    ...: ``env_client.HttpEnvironment``'s options)."""
    try:
        made = http_environment(url, **args)
    except TypeError as exc:
        raise EnvironmentConfigError(f"{key}_args: the HTTP client does not take {sorted(args)}: {exc}") from None
    except ValueError as exc:
        raise EnvironmentConfigError(f"{key}: {exc}") from None
    return made


def attach_environment(pack: TaskPack, factory: EnvironmentFactory, max_turns: int | None = None) -> TaskPack:
    """Return ``pack`` with ``factory`` as its environment: its samples carry the tools' schemas for the prompt, and its
    eval episodes run ``max_turns`` assistant turns (default: the environment's own ``max_turns``, else 4)."""
    schemas = factory.tool_schemas()
    transform = pack.transform
    if max_turns is None:
        max_turns = int(getattr(factory(), "max_turns", 0) or 4)

    def with_tools(sample: Sample, *, split: str, rng: random.Random) -> Sample:
        if transform is not None:
            sample = transform(sample, split=split, rng=rng)
        return dataclasses.replace(sample, tools=schemas) if schemas else sample

    return dataclasses.replace(pack, make_environment=factory, transform=with_tools, max_turns=max_turns)
