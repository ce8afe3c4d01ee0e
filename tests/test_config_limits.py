"""Config values that cannot work, and config files that would hang or crash the loader, are one-line
start-up errors naming the key or the file (numeric ranges declared beside each config dataclass)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import typing

import pytest

from mmreason.config import MAX_CONFIG_DEPTH, ConfigError, Range, load_config, ranges_of
from mmreason.eval.config import EvalConfig, GenKwargs, ModelArgs, parse_gen_kwargs
from mmreason.models.loading import ModelConfig
from mmreason.train.config import TrainConfig


def _config_classes(root: type) -> list[type]:
    found, todo = [], [root]
    while todo:
        cls = todo.pop()
        found.append(cls)
        for tp in typing.get_type_hints(cls).values():
            for arg in (tp, *typing.get_args(tp)):
                if dataclasses.is_dataclass(arg) and arg not in found:
                    todo.append(arg)
    return found


ALL_CONFIGS = sorted(
    {*_config_classes(TrainConfig), *_config_classes(EvalConfig), ModelArgs, GenKwargs, ModelConfig},
    key=lambda c: c.__name__,
)


def _is_numeric(tp) -> bool:
    return tp in (int, float) or any(a in (int, float) for a in typing.get_args(tp))


@pytest.mark.parametrize("cls", ALL_CONFIGS, ids=lambda c: c.__name__)
def test_every_numeric_config_field_states_its_range(cls):
    hints = typing.get_type_hints(cls)
    numeric = {f.name for f in dataclasses.fields(cls) if _is_numeric(hints[f.name])}
    assert numeric <= set(ranges_of(cls)), f"{cls.__name__} fields without a range: {numeric - set(ranges_of(cls))}"
    defaults = cls(
        **{
            f.name: []
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
    )
    for name, valid in ranges_of(cls).items():  # every default lies in its own range
        value = getattr(defaults, name)
        assert value is None or isinstance(value, dict) or value in valid, (cls.__name__, name, value, str(valid))


def test_range_notation():
    r = Range.parse("(0, 1]")
    assert 1.0 in r and 0.5 in r and 0.0 not in r and 1.0001 not in r and math.nan not in r
    assert str(r) == "(0, 1]" and str(Range.parse("[1, inf)")) == "[1, inf)"
    assert math.inf not in Range.parse("[0, inf]") and 1e300 in Range.parse("[0, inf)")
    with pytest.raises(ValueError):
        Range.parse("0..1")


BAD_OVERRIDES = [
    ("rollout.temperature=-1", "rollout.temperature"),
    ("rollout.temperature=.nan", "rollout.temperature"),
    ("rollout.temperature=0", "rollout.temperature"),  # greedy: every rollout of a group the same
    ("prompts_per_step=0", "prompts_per_step"),
    ("learning_rate=-1", "learning_rate"),
    ("learning_rate=.inf", "learning_rate"),
    ("rollout.top_p=7", "rollout.top_p"),
    ("algorithm.epsilon=-5", "algorithm.epsilon"),
    ("warmup_ratio=5", "warmup_ratio"),
    ("adam_beta1=-0.1", "adam_beta1"),
    ("adam_beta2=2", "adam_beta2"),
    ("max_grad_norm=.nan", "max_grad_norm"),
    ("max_grad_norm=0", "max_grad_norm"),
    ("output_dir=/", "output_dir"),
    ("output_dir=~", "output_dir"),
    ("rewards=[{name: anls, weight: .nan}]", "rewards[0].weight"),
    ("rewards=[{name: anls, weight: {a: .nan}}]", "rewards[0].weight.a"),
    ("mini_batch_size=0", "mini_batch_size"),
    ("save_total_limit=0", "save_total_limit"),
    ("seed=-1", "seed"),
    ("algorithm.beta=-0.1", "algorithm.beta"),
    ("algorithm.num_iterations=0", "algorithm.num_iterations"),
    ("rollout.max_completion_length=0", "rollout.max_completion_length"),
    ("rollout.top_k=0", "rollout.top_k"),
    ("data.video_fps=0", "data.video_fps"),
    ("augment.hint_min=2", "augment.hint_min"),
    ("model.lora_dropout=1", "model.lora_dropout"),
    ("reward_timeout_s=-3", "reward_timeout_s"),
]


@pytest.mark.parametrize("override, key", BAD_OVERRIDES)
def test_a_value_outside_its_range_is_an_error_naming_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, [override])
    message = str(e.value)
    assert message.startswith(f"{key}:") and "\n" not in message, message


def test_eval_generation_ranges():
    assert parse_gen_kwargs("temperature=0").temperature == 0.0  # greedy is valid in eval
    for text, key in [
        ("temperature=-1", "temperature"),
        ("top_p=7", "top_p"),
        ("max_new_tokens=0", "max_new_tokens"),
        ("temperature=nan", "temperature"),
    ]:
        with pytest.raises(ConfigError, match=f"--gen_kwargs: {key}:"):
            parse_gen_kwargs(text)
    with pytest.raises(ConfigError, match="--limit: nan"):
        EvalConfig(model="m", tasks=["shapes"], limit=math.nan).validate()


def test_cli_refuses_a_bad_value_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "mmreason", "train", "configs/quickstart.yaml", "rollout.temperature=-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "mmreason train: error: configs/quickstart.yaml: rollout.temperature: -1.0 is outside its valid range (0, inf)"
    ]


# ---- hostile files -----------------------------------------------------------------------------


def _laughs(levels: int = 9) -> str:
    lines = ["data:", "  task_args:", "    a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, levels):
        lines.append(f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _one_line_error(path, overrides=()) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, path, list(overrides))
    message = str(e.value)
    assert "\n" not in message, message
    return message


def test_billion_laughs_aliases_are_refused(tmp_path):
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs())
    assert len(path.read_bytes()) < 700  # the file: 594 bytes, 9^9 values once expanded
    assert "expands to more than" in _one_line_error(path)
    override = (
        "data.task_args.x={a0: &a0 [l,l,l,l,l,l,l,l,l], "
        + ", ".join(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9))
        + "}"
    )
    assert "override 'data.task_args.x'" in _one_line_error(None, [override])
    small = tmp_path / "small.yaml"  # an anchor reused a few times is fine
    small.write_text("data:\n  task_args:\n    a: &a [1, 2]\n    b: *a\n")
    assert load_config(TrainConfig, small).data.task_args == {"a": [1, 2], "b": [1, 2]}


def test_self_including_config_is_refused(tmp_path):
    (tmp_path / "self.yaml").write_text("include: self.yaml\nseed: 1\n")
    assert "includes itself" in _one_line_error(tmp_path / "self.yaml")
    (tmp_path / "a.yaml").write_text("include: b.yaml\n")
    (tmp_path / "b.yaml").write_text("include: a.yaml\n")
    message = _one_line_error(tmp_path / "a.yaml")
    assert "includes itself" in message and "b.yaml" in message


def test_non_utf8_config_is_refused(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("seed: 1\n# caf\xe9\n".encode("latin-1"))
    message = _one_line_error(path)
    assert "latin1.yaml" in message and "not UTF-8" in message and "0xe9" in message


@pytest.mark.parametrize("depth", [5000, MAX_CONFIG_DEPTH + 5])
def test_deep_structure_is_refused(tmp_path, depth):
    path = tmp_path / "deep.yaml"
    path.write_text("data:\n  task_args:\n    x: " + "[" * depth + "]" * depth + "\n")
    message = _one_line_error(path)
    assert "deep.yaml" in message and "nested" in message
    assert "nested" in _one_line_error(None, ["data.task_args.x=" + "[" * depth + "]" * depth])


def test_bad_yaml_is_one_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("seed: [1, 2\nmax_steps: 3\n")
    assert "not valid YAML" in _one_line_error(path)
