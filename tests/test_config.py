"""Config: YAML + dotted overrides, validated; errors name the key and the closest valid one."""

from __future__ import annotations

import pytest

from mmreason.config import ConfigError, load_config
from mmreason.train.config import TrainConfig


def _write(tmp_path, text: str):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_yaml_and_overrides_resolve_with_types(tmp_path):
    path = _write(tmp_path, "rollout:\n  num_generations: 4\nlearning_rate: 1e-6\nrewards:\n  - name: anls\n")
    cfg = load_config(TrainConfig, path, ["rollout.temperature=0.7", "max_steps=20", "model.lora=true"])
    assert cfg.rollout.num_generations == 4
    assert cfg.rollout.temperature == 0.7
    assert cfg.learning_rate == pytest.approx(1e-6)  # YAML's "1e-6" is a string; it becomes a float
    assert cfg.max_steps == 20 and cfg.model.lora is True
    assert cfg.rewards[0].name == "anls" and cfg.rewards[0].weight == 1.0


def test_unknown_key_in_file_names_it_and_the_closest(tmp_path):
    path = _write(tmp_path, "rollout:\n  num_generation: 4\n")
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, path)
    assert "rollout.num_generation" in str(e.value)
    assert "rollout.num_generations" in str(e.value)
    assert str(path) in str(e.value)


def test_unknown_override_names_the_closest_key():
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, ["algorithm.epsilon_hihg=0.28"])
    assert "algorithm.epsilon_hihg" in str(e.value) and "algorithm.epsilon_high" in str(e.value)


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, ["rollout.num_generations=many"])
    assert "rollout.num_generations" in str(e.value) and "many" in str(e.value)
    with pytest.raises(ConfigError, match="model.lora"):
        load_config(TrainConfig, None, ["model.lora=3"])


def test_invalid_choice_is_rejected():
    with pytest.raises(ConfigError, match="reward_on_error"):
        load_config(TrainConfig, None, ["reward_on_error=ignore"])


def test_include_merges_a_shared_file(tmp_path):
    (tmp_path / "base.yaml").write_text("seed: 3\nrollout:\n  num_generations: 2\n  temperature: 0.5\n")
    path = _write(tmp_path, "include: base.yaml\nrollout:\n  num_generations: 6\n")
    cfg = load_config(TrainConfig, path)
    assert (cfg.seed, cfg.rollout.num_generations, cfg.rollout.temperature) == (3, 6, 0.5)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_config(TrainConfig, tmp_path / "nope.yaml")


def test_overrides_reach_inside_mapping_fields(tmp_path):
    path = _write(tmp_path, "data:\n  task_args: {n: 8, pages: '3..5'}\n")
    cfg = load_config(TrainConfig, path, ["data.task_args.n=4", "algorithm.estimator_options.scope=group"])
    assert cfg.data.task_args == {"n": 4, "pages": "3..5"}
    assert cfg.algorithm.estimator_options == {"scope": "group"}
    with pytest.raises(ConfigError, match="data.task_arg.n"):
        load_config(TrainConfig, path, ["data.task_arg.n=4"])
