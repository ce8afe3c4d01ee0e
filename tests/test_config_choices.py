"""Closed sets of strings are ``Literal`` types: the loader refuses any other value in one line naming the key,
and each set agrees with the table the code dispatches on."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from mmreason.config import ConfigError, load_config
from mmreason.eval.config import ModelArgs, parse_model_args
from mmreason.models.families import FAMILIES
from mmreason.models.families.base import ModelFamily
from mmreason.models.loading import _DTYPES, DType
from mmreason.rl.estimators.grpo import SCALES
from mmreason.rl.losses.aggregation import LOSS_TYPES
from mmreason.rl.losses.common import IS_LEVELS
from mmreason.rl.rollout_correction import IS_MODES
from mmreason.train import config as train_config
from mmreason.train.config import TrainConfig


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.prompt_overflow=cut", "data.prompt_overflow: 'cut' is not filter or downscale"),
        ("rollout.vllm_weight_sync=nfs", "rollout.vllm_weight_sync: 'nfs' is not collective or directory"),
        ("algorithm.loss_type=ppo", "algorithm.loss_type: 'ppo' is not one of grpo, bnpo, dapo, dr_grpo, luspo"),
        ("model.attn_implementation=flash", "model.attn_implementation: 'flash' is not one of auto, flash_attention_2"),
        ("anchor.source=memory", "anchor.source: 'memory' is not one of replay, reference, reflect"),
    ],
)
def test_a_value_outside_a_closed_set_names_the_key_and_the_choices(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, [override])
    assert str(e.value).startswith(message)


def test_model_args_choices_name_the_flag_and_the_key():
    with pytest.raises(ConfigError, match=r"^--model_args: dtype: 'int8' is not one of auto, float32"):
        parse_model_args("dtype=int8")
    with pytest.raises(ConfigError, match=r"^--model_args: backend: 'sglang' is not hf or vllm$"):
        parse_model_args("backend=sglang")


def test_config_choices_agree_with_the_tables_the_code_dispatches_on():
    def choices(alias):
        return tuple(typing.get_args(alias))

    assert choices(train_config.LossType) == tuple(LOSS_TYPES)
    assert choices(train_config.ScaleRewards) == tuple(SCALES)
    assert choices(train_config.ImportanceSamplingMode) == tuple(IS_MODES)
    assert choices(train_config.ImportanceSamplingLevel) == tuple(IS_LEVELS)
    assert choices(DType) == ("auto", *_DTYPES)


def _config_classes(cls: type) -> list[type]:
    """``cls`` and every config dataclass nested in it."""
    hints = typing.get_type_hints(cls)
    nested = [hints[f.name] for f in dataclasses.fields(cls) if dataclasses.is_dataclass(hints[f.name])]
    return [cls, *[c for n in nested for c in _config_classes(n)]]


def test_no_config_field_is_a_bare_string_documented_by_a_choice_comment():
    """A ``str`` field whose comment lists bare words as choices (``# a | b``) is a closed set left untyped (a
    comment that offers a reference, ``pkg.module:fn``, is an open set)."""
    for klass in {*_config_classes(TrainConfig), ModelArgs}:
        hints = typing.get_type_hints(klass)
        lines = inspect.getsource(klass).splitlines()
        for f in dataclasses.fields(klass):
            line = next((x for x in lines if x.strip().startswith(f"{f.name}: ")), "")
            comment = line.split("#", 1)[1] if "#" in line else ""
            choices = [c.strip() for c in comment.split("|")] if "|" in comment else []
            if hints[f.name] is str and choices and not any(":" in c or "." in c for c in choices):
                pytest.fail(f"{klass.__name__}.{f.name}: a closed set typed as str ({comment.strip()})")


def test_a_model_family_with_a_value_outside_its_set_fails_naming_it():
    qwen = FAMILIES[0]
    with pytest.raises(ValueError, match=r"positions='alibi' is not one of mrope, rope1d"):
        ModelFamily(**{**{f.name: getattr(qwen, f.name) for f in dataclasses.fields(qwen)}, "positions": "alibi"})
