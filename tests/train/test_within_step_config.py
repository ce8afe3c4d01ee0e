"""One name and one block for the within-step method: ``within_step: {name, options}``; the old blocks
(``hint.enabled: true`` ...) still work for one release, read as the new block with a deprecation warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from mmreason.config import ConfigError, load_config
from mmreason.train.config import TrainConfig
from mmreason.train.within_step import ConfigDeprecationWarning

QUICKSTART = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")


def _cfg(*overrides: str) -> TrainConfig:
    return load_config(TrainConfig, QUICKSTART, list(overrides))


def test_the_block_names_the_method_and_its_options_are_checked_as_its_settings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new block warns about nothing
        cfg = _cfg("within_step.name=hint", "within_step.options={levels: 2, attempts: 1}")
    assert cfg.hint.enabled and (cfg.hint.levels, cfg.hint.attempts) == (2, 1)
    assert not (cfg.refine.enabled or cfg.anchor.enabled or cfg.augment.enabled)
    with pytest.raises(ConfigError, match=r"within_step.options.levels"):
        _cfg("within_step.name=hint", "within_step.options={levels: 0.5}")
    with pytest.raises(ConfigError, match=r"unknown config key 'within_step.options.leveles'"):
        _cfg("within_step.name=hint", "within_step.options={leveles: 2}")
    with pytest.raises(ConfigError, match=r"within_step.name"):
        _cfg("within_step.name=refinement")


def test_an_old_block_is_read_as_the_new_one_with_a_deprecation_warning():
    with pytest.warns(ConfigDeprecationWarning, match=r"within_step: \{name: hint, options: \{'levels': 2\}\}"):
        cfg = _cfg("hint.enabled=true", "hint.levels=2")
    assert cfg.within_step.name == "hint" and cfg.within_step.options == {"levels": 2}
    assert cfg.hint.enabled and cfg.hint.levels == 2


def test_two_methods_are_refused_in_either_form():
    with pytest.raises(ConfigError, match=r"refine.enabled and hint.enabled"):
        _cfg("refine.enabled=true", "hint.enabled=true")
    with pytest.raises(ConfigError, match=r"refine.enabled: within_step.name is 'hint'"):
        _cfg("within_step.name=hint", "refine.enabled=true")
