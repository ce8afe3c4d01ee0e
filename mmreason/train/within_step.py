"""``within_step: {name, options}``: the one config block of the within-step method a run uses (``augment``,
``refine``, ``hint`` or ``anchor``: the names of ``sampling.WITHIN_STEP``, of the docs and of this block alike).

The options are the method's own settings (``AugmentConfig``, ``RefineConfig``, ``HintConfig``,
``AnchorConfig`` in ``train/config.py``), checked as such (unknown keys and ranges name
``within_step.options.<key>``). Resolved, the run's ``cfg.<name>`` holds them with ``enabled: true``: the method's
code reads its typed settings there.

The old blocks (``hint: {enabled: true, levels: 2}`` ...) are accepted as aliases for one release: such a config
is read as ``within_step: {name: hint, options: {levels: 2}}`` with a ``ConfigDeprecationWarning`` that says how
to write it. Two methods at once are refused (one block has one name).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

from mmreason.config import ConfigError, build

WithinStepName = Literal["augment", "refine", "hint", "anchor"]
NAMES: tuple[WithinStepName, ...] = ("augment", "refine", "hint", "anchor")


class ConfigDeprecationWarning(FutureWarning):
    """A config key that still works but will be removed (shown to users by default)."""


@dataclass
class WithinStepConfig:
    """The within-step method that redoes some of a step's groups (none when ``name`` is null)."""

    name: WithinStepName | None = None  # augment | refine | hint | anchor (mmreason list rollouts)
    options: dict[str, Any] = field(default_factory=dict)  # the method's settings (its block in docs/training.md)


def resolve_within_step(cfg: Any) -> None:
    """Make ``cfg.within_step`` and the method's typed block agree: build the block from ``within_step.options``,
    or read an old ``<name>.enabled: true`` block as ``within_step`` with a deprecation warning."""
    chosen = cfg.within_step.name
    legacy = [k for k in NAMES if getattr(cfg, k).enabled and k != chosen]
    if chosen is None and len(legacy) > 1:
        raise ConfigError(
            f"{' and '.join(f'{k}.enabled' for k in legacy)}: each regenerates groups within a step; "
            "choose one with within_step.name"
        )
    if chosen is not None and legacy:
        raise ConfigError(
            f"{legacy[0]}.enabled: within_step.name is {chosen!r}; a run uses one within-step method "
            "(set it with within_step: {name, options})"
        )
    if chosen is None and legacy:
        name = legacy[0]
        block = getattr(cfg, name)
        defaults = type(block)()
        options = {
            f.name: getattr(block, f.name)
            for f in dataclasses.fields(block)
            if f.name != "enabled" and getattr(block, f.name) != getattr(defaults, f.name)
        }
        warnings.warn(
            f"{name}: {{enabled: true, ...}} is deprecated and will be removed in the next release; write "
            f"within_step: {{name: {name}, options: {options}}}",
            ConfigDeprecationWarning,
            stacklevel=2,
        )
        cfg.within_step = WithinStepConfig(name, options)
        return
    if chosen is not None:
        kind = type(getattr(cfg, chosen))
        if "enabled" in cfg.within_step.options:
            raise ConfigError("within_step.options.enabled: within_step.name turns the method on")
        setattr(cfg, chosen, build(kind, {**cfg.within_step.options, "enabled": True}, "within_step.options"))
