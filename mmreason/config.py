"""YAML + dotted ``key=value`` overrides → a validated, typed config.

Configs are trees of dataclasses: every default lives in the dataclass, never in a ``cfg.get``.
An unknown or mistyped key is an error naming it and the closest valid key; a value of the wrong type
is an error naming the key, the value and the expected type.

    cfg = load_config(RunConfig, "configs/quickstart.yaml", ["rollout.temperature=0.7", "max_steps=20"])
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from mmreason.registry import closest

C = TypeVar("C")


class ConfigError(ValueError):
    """A config problem, with the file and key it is about."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and gently convert) ``value`` against the annotation ``tp``; errors name ``key``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{key}: {value!r} is not a {_type_name(tp)}")
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return build(tp, value, prefix=key)
    if origin in (list, tuple):
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML reads "1e-6" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if typing.get_origin(tp) is typing.Literal:
        if value in typing.get_args(tp):
            return value
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(map(str, typing.get_args(tp)))}")
    return value


def _dict_keys(cls: type, prefix: str = "") -> list[str]:
    """Dotted names of mapping-typed fields: overrides may reach inside them (``data.task_args.n=4``)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            keys.extend(_dict_keys(tp, prefix + f.name + "."))
        elif tp is dict or typing.get_origin(tp) is dict:
            keys.append(prefix + f.name)
    return keys


def _valid_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        keys.append(prefix + f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            keys.extend(_valid_keys(hints[f.name], prefix + f.name + "."))
    return keys


def build(cls: type[C], data: dict[str, Any], prefix: str = "") -> C:
    """Instantiate dataclass ``cls`` from a (nested) mapping, validating every key and value."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            hint = closest(str(key), sorted(names))
            msg = f"unknown config key {full!r}"
            raise ConfigError(msg + (f" (did you mean {(prefix + '.' if prefix else '') + hint!r}?)" if hint else ""))
        kwargs[key] = _coerce(value, hints[key], full)
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if callable(check):
        check()
    return obj


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=value`` → (["a", "b"], value parsed as YAML: numbers, booleans, lists, null)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key=value")
    key, raw = item.split("=", 1)
    key = key.strip().lstrip("-")
    if not key:
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(cls: type, data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Merge dotted overrides into a raw mapping; unknown paths fail with the closest valid key."""
    valid = _valid_keys(cls)
    mappings = _dict_keys(cls)
    for item in overrides:
        path, value = parse_override(item)
        dotted = ".".join(path)
        if dotted not in valid and not any(dotted.startswith(m + ".") for m in mappings):
            hint = closest(dotted, valid)
            raise ConfigError(f"unknown config key {dotted!r} in override {item!r}"
                              + (f" (did you mean {hint!r}?)" if hint else ""))
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[path[-1]] = value
    return data


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(p)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(p)!r} must hold a mapping at the top level")
    base = data.pop("include", None)  # shared settings: `include: other.yaml` (relative to this file)
    if base:
        merged = read_yaml(p.parent / base)
        _deep_update(merged, data)
        data = merged
    return data


def _deep_update(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_update(into[key], value)
        else:
            into[key] = value


def load_config(cls: type[C], path: str | Path | None = None, overrides: list[str] | None = None) -> C:
    data = read_yaml(path) if path else {}
    data = apply_overrides(cls, data, list(overrides or []))
    try:
        return build(cls, data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if path else str(exc)) from None


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def dump_yaml(cfg: Any, path: str | Path | None = None) -> str:
    text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
    if path is not None:
        Path(path).write_text(text)
    return text
