"""The reward registry and the ``@reward`` decorator.

``REWARDS`` is filled on its first lookup by importing every module of ``mmreason.rewards`` (the
top-level ``rewards/`` folder: rewards shared by packs), each task pack's ``rewards`` module (a reward only
one pack uses lives in its pack, e.g. ``tasks/docseeker/rewards.py``) and every entry point in the group ``mmreason.rewards``, so an installed
third-party package adds rewards by declaring, in its own pyproject::

    [project.entry-points."mmreason.rewards"]
    my_rewards = "my_package.rewards"            # a module whose @reward functions register on import
    caption_match = "my_package.rewards:caption"  # or one function, registered under the entry name
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, TypeVar

from mmreason.registry import Registry, pack_modules

ENTRY_POINT_GROUP = "mmreason.rewards"
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class RewardInfo:
    """What ``@reward`` records on a function.

    ``keys``: the sub-score keys a dict-returning reward always returns, so that the runner knows its
    columns before the first call (optional; without it they are learned from the first output).
    ``diagnostics``: sub-score keys that are logged but carry weight 0 unless the config's weight dict
    names them (e.g. ``mcq``'s ``unparsed`` counter).
    """

    name: str
    keys: tuple[str, ...] = ()
    diagnostics: tuple[str, ...] = ()


def _load_rewards() -> None:
    package = importlib.import_module("mmreason.rewards")
    for module in pkgutil.iter_modules(package.__path__, prefix=package.__name__ + "."):
        importlib.import_module(module.name)
    for module_name in pack_modules("rewards").values():  # a pack's own rewards: its ``rewards`` module
        importlib.import_module(module_name)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = point.load()
        except Exception as err:
            raise ImportError(
                f"reward plug-in entry point {point.name!r} ({point.value}) failed to load: {err}"
            ) from err
        if callable(obj) and point.name not in REWARDS:  # a module registers its own rewards on import
            REWARDS.add(point.name, obj)


REWARDS: Registry[Callable[..., Any]] = Registry("reward", loader=_load_rewards)


def reward(
    name: str | None = None,
    *,
    keys: tuple[str, ...] = (),
    diagnostics: tuple[str, ...] = (),
    replace: bool = False,
) -> Callable[[F], F]:
    """Decorator: register a reward function under ``name`` (default: the function name).

    The function's first docstring line is what ``mmreason list rewards`` prints, so make it say what
    the reward scores. Example::

        from mmreason.rewarding import reward

        @reward("caption_mentions_label")
        def caption_mentions_label(samples, trajectories, **kwargs):
            \"\"\"1 if the completion names the sample's label.\"\"\"
            return [float(s.meta["label"] in t.completion_text) for s, t in zip(samples, trajectories)]
    """

    def decorator(fn: F) -> F:
        key = name or fn.__name__
        fn.__dict__["__mmreason_reward__"] = RewardInfo(key, tuple(keys), tuple(diagnostics))
        REWARDS.add(key, fn, replace=replace)
        return fn

    return decorator


def reward_info(fn: Any) -> RewardInfo | None:
    """The ``RewardInfo`` that ``@reward`` attached to ``fn``, if any."""
    return getattr(fn, "__mmreason_reward__", None)


def list_rewards() -> list[tuple[str, str]]:
    """(name, one-line doc) rows for ``mmreason list rewards``."""
    return REWARDS.describe()
