"""YAML + dotted ``key=value`` overrides → a validated, typed config.

Configs are trees of dataclasses: every default lives in the dataclass, never in a ``cfg.get``.
An unknown or mistyped key is an error naming it and the closest valid key; a value of the wrong type
is an error naming the key, the value and the expected type. Every numeric field states its valid
interval in its dataclass's ``RANGES`` (``"(0, 1]"``, ``"[1, inf)"``), checked whenever a config is
built; a number is never NaN or infinite.

    cfg = load_config(TrainConfig, "configs/shapes/quickstart.yaml", ["rollout.temperature=0.7", "max_steps=20"])

(``TrainConfig`` is ``mmreason.train.config.TrainConfig``; any dataclass tree loads the same way.)
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from mmreason.registry import closest

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")


class ConfigError(ValueError):
    """A config problem, with the file and key it is about."""


@dataclasses.dataclass(frozen=True)
class Range:
    """A closed, open or half-open interval of valid values, written as in maths: ``"(0, 1]"``,
    ``"[1, inf)"``, ``"[0, 1)"``. ``inf`` as a bound is never itself valid (values are finite)."""

    low: float
    high: float
    low_closed: bool
    high_closed: bool

    @classmethod
    def parse(cls, text: str) -> Range:
        text = text.strip()
        if len(text) < 5 or text[0] not in "[(" or text[-1] not in "])" or text.count(",") != 1:
            raise ValueError(f"range {text!r} is not an interval like '(0, 1]' or '[1, inf)'")
        low, high = (float(part) for part in text[1:-1].split(","))
        return cls(low, high, text[0] == "[" and math.isfinite(low), text[-1] == "]" and math.isfinite(high))

    def __contains__(self, value: float) -> bool:
        above = value >= self.low if self.low_closed else value > self.low
        below = value <= self.high if self.high_closed else value < self.high
        return math.isfinite(value) and above and below

    def __str__(self) -> str:
        def bound(x: float) -> str:
            return "inf" if x == math.inf else "-inf" if x == -math.inf else f"{x:g}"

        return (
            f"{'[' if self.low_closed else '('}{bound(self.low)}, {bound(self.high)}{']' if self.high_closed else ')'}"
        )


def ranges_of(cls: type) -> dict[str, Range]:
    """The ``RANGES`` a config dataclass and its bases declare, parsed (an unknown field name is an error).
    A class that takes fields from a shared record (``MediaLimits``) takes their ranges with them."""
    declared: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        declared.update(vars(klass).get("RANGES") or {})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(declared) - names)
    if unknown:
        raise TypeError(f"{cls.__name__}.RANGES names fields it does not have: {unknown}")
    return {name: Range.parse(text) for name, text in declared.items()}


def check_ranges(obj: Any, prefix: str = "") -> None:
    """Every field of ``obj`` with a declared range holds a value inside it (None = unset, allowed
    where the type is optional); errors name the dotted key, the value and the interval."""
    for name, valid in ranges_of(type(obj)).items():
        value = getattr(obj, name)
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and value not in valid:
            key = f"{prefix}.{name}" if prefix else name
            raise ConfigError(f"{key}: {value!r} is outside its valid range {valid}")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check (and gently convert) ``value`` against the annotation ``tp``; errors name ``key``."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{key}: {value!r} is not a finite number")
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
        inner = [e for e in errors if e.startswith((f"{key}.", f"{key}["))]  # the shape matched, a part did not
        raise ConfigError(inner[0] if inner else f"{key}: {value!r} is not a {_type_name(tp)}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
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
        _, value_tp = typing.get_args(tp) or (Any, Any)
        return {k: _coerce(v, value_tp, f"{key}.{k}") for k, v in value.items()}
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
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):  # YAML reads "1e-6" (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if not math.isfinite(number):
            raise ConfigError(f"{key}: {value!r} is not a finite number")
        return number
    if tp is str:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if typing.get_origin(tp) is typing.Literal:
        if value in typing.get_args(tp):
            return value
        raise ConfigError(f"{key}: {value!r} is not {choices(typing.get_args(tp))}")
    return value


def choices(values: tuple[Any, ...]) -> str:
    """``a or b`` for two choices, ``one of a, b, c`` for more (the tail of a bad-choice error)."""
    names = [str(v) for v in values]
    return " or ".join(names) if len(names) <= 2 else f"one of {', '.join(names)}"


def _dict_keys(cls: type, prefix: str = "") -> list[str]:
    """Dotted names of mapping-typed fields: overrides may reach inside them (``data.task_args.n=4``)."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
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
    check_ranges(obj, prefix)
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
    except RecursionError:
        raise ConfigError(f"override {key!r}: nested too deeply to parse") from None
    check_tree(value, f"override {key!r}")
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
            raise ConfigError(
                f"unknown config key {dotted!r} in override {item!r}" + (f" (did you mean {hint!r}?)" if hint else "")
            )
        node = data
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[path[-1]] = value
    return data


MAX_CONFIG_BYTES = 4 * 2**20  # a config file larger than this is refused before parsing
MAX_CONFIG_NODES = 100_000  # values in a config tree, with YAML aliases counted as often as they are used
MAX_CONFIG_DEPTH = 64  # nesting of mappings and lists
MAX_INCLUDES = 16  # `include:` chain length


def check_tree(value: Any, where: str) -> None:
    """Refuse a parsed config value that expands past ``MAX_CONFIG_NODES`` values (YAML aliases, a
    "billion laughs" file, are counted at every use: that is what dumping or copying it costs) or
    nests deeper than ``MAX_CONFIG_DEPTH``. Stops as soon as a limit is passed, so it is cheap."""
    stack = [(value, 1)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            raise ConfigError(
                f"{where}: expands to more than {MAX_CONFIG_NODES:,} values (YAML aliases are "
                "counted at each use); write the values out or shrink them"
            )
        if depth > MAX_CONFIG_DEPTH:
            raise ConfigError(f"{where}: nested deeper than {MAX_CONFIG_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, depth + 1) for v in node)


def safe_load_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load`` with every failure one ConfigError line naming ``where``, and the result
    bounded by ``check_tree``."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ConfigError(f"{where}: nested too deeply to parse (over {MAX_CONFIG_DEPTH} levels are refused)") from None
    check_tree(data, where)
    return data


def read_yaml(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A config file as a mapping, its ``include:`` merged beneath it. UTF-8 only; at most
    ``MAX_CONFIG_BYTES``; an include cycle or a chain over ``MAX_INCLUDES`` files is an error."""
    p = Path(path)
    where = f"config file {str(p)!r}"
    if not p.is_file():
        raise ConfigError(f"{where} does not exist")
    resolved = p.resolve()
    if resolved in _chain:
        cycle = " -> ".join(str(c) for c in (*_chain, resolved))
        raise ConfigError(f"{where} includes itself: {cycle}")
    if len(_chain) >= MAX_INCLUDES:
        raise ConfigError(f"{where}: more than {MAX_INCLUDES} nested includes")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where} is {p.stat().st_size:,} bytes; configs are limited to {MAX_CONFIG_BYTES:,}")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{where} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        ) from None
    data = safe_load_yaml(text, where) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a mapping at the top level")
    base = data.pop("include", None)  # shared settings: `include: other.yaml` (relative to this file)
    if base:
        if not isinstance(base, str):
            raise ConfigError(f"{where}: include: {base!r} is not a file name")
        merged = read_yaml(p.parent / base, (*_chain, resolved))
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
    """The config as plain data, every ``*api_key`` field blanked (a secret is never saved, logged or sent to
    a tracker: config.yaml, checkpoints and the printed config all come from here)."""
    return _blank_secrets(dataclasses.asdict(cfg))


def _blank_secrets(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: None if isinstance(k, str) and k.endswith("api_key") else _blank_secrets(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_blank_secrets(v) for v in value]
    return value


def dump_yaml(cfg: Any, path: str | Path | None = None) -> str:
    text = yaml.safe_dump(to_dict(cfg), sort_keys=False)
    if path is not None:
        Path(path).write_text(text)
    return text
