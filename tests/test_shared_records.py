"""Settings that training, evaluation and prompts share are declared once: ``MediaLimits`` (the eleven media and
prompt limits) and ``VllmConnection`` (a vLLM server's address and timeouts); the users' flat keys still work."""

from __future__ import annotations

import dataclasses

import pytest

from mmreason.config import ConfigError, load_config
from mmreason.eval.config import ModelArgs, parse_model_args
from mmreason.eval.scoring import PromptOptions
from mmreason.media.limits import MediaLimits, media_fields
from mmreason.media.video_plan import VideoLimits
from mmreason.rollout.backends.connection import VllmConnection
from mmreason.train.config import DataConfig, RolloutConfig, TrainConfig

MEDIA = [f.name for f in dataclasses.fields(MediaLimits)]
CONNECTION = [f.name for f in dataclasses.fields(VllmConnection)]


def _declared_in(cls: type) -> set[str]:
    """Fields whose annotation is written in ``cls``'s own body (not inherited)."""
    return set(vars(cls).get("__annotations__", {}))


def test_each_shared_setting_is_declared_once():
    assert len(MEDIA) == 11 and len(CONNECTION) == 5  # max_images and max_videos joined the nine
    for cls in (DataConfig, ModelArgs, PromptOptions):
        assert issubclass(cls, MediaLimits)
        # the training default of max_prompt_length (4096, the eval's is 32768) is the one re-stated value
        assert _declared_in(cls) & set(MEDIA) <= {"max_prompt_length"}, cls
    for cls in (RolloutConfig, ModelArgs):
        assert issubclass(cls, VllmConnection) and not _declared_in(cls) & set(CONNECTION), cls
    assert DataConfig().max_prompt_length == 4096 and ModelArgs().max_prompt_length == 32768


def test_the_flat_keys_of_a_run_config_and_of_model_args_keep_working():
    cfg = load_config(
        TrainConfig,
        None,
        ["data.video_total_pixels=50000", "data.video_fps=1.5", "rollout.vllm_server_port=8123"],
    )
    assert cfg.data.video == VideoLimits(fps=1.5, max_frames=16, total_pixels=50000)
    assert cfg.rollout.vllm_server_port == 8123
    args = parse_model_args("video_total_pixels=50000,video_fps=1.5,max_pixels=3136,vllm_server_host=h")
    assert args.video == cfg.data.video and (args.max_pixels, args.vllm_server_host) == (3136, "h")
    # eval prompts take the model args' limits by name
    options = PromptOptions(**media_fields(args))
    assert options.media_limits() == args.media_limits() and options.overflow == "filter"


@pytest.mark.parametrize(
    "build",
    [
        lambda: load_config(TrainConfig, None, ["data.video_max_frames=0"]),
        lambda: parse_model_args("video_max_frames=0"),
    ],
)
def test_the_shared_ranges_are_checked_wherever_the_fields_are_used(build):
    with pytest.raises(ConfigError, match=r"video_max_frames: 0 is outside its valid range \[1, inf\)"):
        build()


def test_the_connection_ranges_are_checked_in_both_places():
    with pytest.raises(ConfigError, match=r"rollout\.vllm_server_timeout: 0.0 is outside"):
        load_config(TrainConfig, None, ["rollout.vllm_server_timeout=0"])
    with pytest.raises(ConfigError, match=r"--model_args: vllm_generate_timeout: -1.0 is outside"):
        parse_model_args("vllm_generate_timeout=-1")
