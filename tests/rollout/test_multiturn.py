"""Multi-turn rollouts: an environment answers each assistant turn with an image; observation tokens are
never trained (action_mask 0) and the whole trajectory goes through the trainer's forward and loss."""

from __future__ import annotations

import json
import threading
import time

import pytest
import torch
from PIL import Image
from rollout_helpers import generate_multiturn_group

from mmreason.rollout.environment import Observation
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.prompts import build_prompt
from mmreason.types import Sample


class ZoomEnv:
    """A tool environment: `<tool_call>{"name": "zoom", ...}</tool_call>` returns a crop of the image.

    Model output is untrusted: a missing or malformed call still gets an (error) observation with the full
    image, so a random policy exercises the image path every turn.
    """

    stop_strings = ("</tool_call>",)

    def reset(self, sample: Sample) -> None:
        self.image = sample.images[0]
        self.calls = 0

    def step(self, action_text: str) -> Observation:
        self.calls += 1
        info = {"turn": self.calls}
        try:
            body = action_text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]
            call = json.loads(body[:1000])
            info["call"] = call
            text = "zoomed:"
        except (IndexError, ValueError):
            text = "no valid tool call; full image:"
            info["error"] = "unparsable"
        return Observation(text=text, images=[self.image.resize((56, 56))], info=info, done=self.calls >= 2)


def _sample() -> Sample:
    image = Image.new("RGB", (84, 84), "blue")
    content = [{"type": "image"}, {"type": "text", "text": "Zoom in, then answer: what colour?"}]
    return Sample(id="mt-0", messages=[{"role": "user", "content": content}], answer="blue", images=[image])


def test_observation_turns_carry_images_and_are_masked(tiny):
    model, processor = tiny
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    trajs = generate_multiturn_group(
        model,
        processor,
        prompt,
        ZoomEnv,
        group_id=0,
        num_generations=3,
        settings=GenerationSettings(max_new_tokens=5),
        max_turns=3,
        max_context=2048,
        seed=0,
        step=1,
    )
    assert len(trajs) == 3
    for t in trajs:
        roles = [turn.role for turn in t.turns]
        assert roles == ["assistant", "observation", "assistant"], roles
        obs = t.turns[1]
        assert t.action_mask[obs.start : obs.end].sum() == 0  # observations are never trained
        for turn in (t.turns[0], t.turns[2]):
            assert t.action_mask[turn.start : turn.end].all()
        assert t.action_mask[: prompt.length].sum() == 0
        # The observation image is in the token stream (expanded image pads) and in the visual inputs.
        image_tokens_in_obs = int((t.mm_token_type_ids[obs.start : obs.end] == 1).sum())
        assert image_tokens_in_obs == 4  # 56x56 px -> 2x2 merged tokens
        assert len(t.visual) == 2 and t.visual[1]["image_grid_thw"].tolist() == [[1, 4, 4]]
        assert "<observation></observation>" in t.completion_text  # rewards see a marker, not the tool's text
        assert "zoomed:" not in t.completion_text and "full image:" not in t.completion_text
        assert "<observation>zoomed:" in t.transcript or "<observation>no valid tool call" in t.transcript
        assert len(t.reward_info["observation_images"]) == 1  # rewards can look at what the model was shown

    # The trainer's forward accepts the interleaved trajectory; gradients come only from action tokens.
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    model.requires_grad_(True)
    try:
        logp, _ = token_logprobs(model, batch)
        assert torch.isfinite(logp).all()
        loss = -(logp * batch.action_mask).sum()
        loss.backward()
        assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0
    finally:
        model.zero_grad(set_to_none=True)
        model.requires_grad_(False)


def test_multiturn_sampling_is_seeded(tiny):
    model, processor = tiny
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    kwargs = dict(
        group_id=0,
        num_generations=2,
        settings=GenerationSettings(max_new_tokens=5),
        max_turns=3,
        max_context=2048,
        seed=4,
        step=2,
    )
    a = generate_multiturn_group(model, processor, prompt, ZoomEnv, **kwargs)
    b = generate_multiturn_group(model, processor, prompt, ZoomEnv, **kwargs)
    assert [t.token_ids.tolist() for t in a] == [t.token_ids.tolist() for t in b]
    assert a[0].token_ids.tolist() != a[1].token_ids.tolist()  # rollouts of a group differ


def _coloured(colour: str, size: int) -> Sample:
    content = [{"type": "image"}, {"type": "text", "text": f"Zoom in on the {size} px picture: what colour?"}]
    return Sample(
        id=f"mt-{colour}",
        messages=[{"role": "user", "content": content}],
        answer=colour,
        images=[Image.new("RGB", (size, size), colour)],
    )


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_episodes_played_together_are_the_episodes_played_alone(tiny, temperature):
    from mmreason.rollout.multiturn import EpisodeStart, run_episode, run_episodes

    model, processor = tiny
    # prompts of different lengths (left padding), two episodes each (first turn shares the prompt's prefill)
    prompts = [
        build_prompt(processor, _coloured(c, size), max_prompt_length=1024) for c, size in (("blue", 84), ("red", 56))
    ]
    settings = GenerationSettings(max_new_tokens=6, temperature=temperature, stop_strings=ZoomEnv.stop_strings)
    kwargs = dict(max_turns=3, max_context=2048, seed=3, step=5)
    starts = [EpisodeStart(p, ZoomEnv(), g, i) for g, p in enumerate(prompts) for i in range(2)]
    together = run_episodes(model, processor, starts, settings, **kwargs)
    alone = [
        run_episode(model, processor, s.prompt, ZoomEnv(), s.group_id, settings=settings, index=s.index, **kwargs)
        for s in starts
    ]
    assert [t.group_id for t in together] == [0, 0, 1, 1]
    for a, b in zip(together, alone):
        assert a.token_ids.tolist() == b.token_ids.tolist()
        assert a.action_mask.tolist() == b.action_mask.tolist()
        assert [(t.role, t.start, t.end) for t in a.turns] == [(t.role, t.start, t.end) for t in b.turns]
        assert a.completion_text == b.completion_text and a.truncated == b.truncated
    if temperature > 0:
        assert together[0].token_ids.tolist() != together[1].token_ids.tolist()  # each episode its own stream


def test_a_row_stopped_by_a_stop_string_keeps_no_pad_from_the_batch(tiny):
    """In a batch, a row whose turn met a stop string is filled with pad while others go on; the pad is not
    part of its action (alone, generate stops there and no pad is drawn)."""
    from mmreason.rollout.multiturn import EpisodeStart, _Episode, _play_turn

    model, processor = tiny
    tok = processor.tokenizer
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    call = tok('<tool_call>{"name": "zoom"}</tool_call>', add_special_tokens=False, return_tensors="pt")
    row = torch.cat([call["input_ids"][0], torch.full((3,), tok.pad_token_id)])
    env = ZoomEnv()
    env.reset(prompt.sample)
    e = _Episode(
        EpisodeStart(prompt, env, 0),
        prompt.input_ids.clone(),
        prompt.mm_token_type_ids.clone(),
        torch.zeros_like(prompt.input_ids),
        [prompt.visual],
        0.0,
    )
    _play_turn(
        processor,
        e,
        row,
        GenerationSettings(max_new_tokens=20, stop_strings=ZoomEnv.stop_strings),
        0,
        max_turns=3,
        max_context=4096,
        max_observation_tokens=None,
        step_timeout_s=None,
    )
    action = e.ids[e.turns[0].start : e.turns[0].end]
    assert action.tolist() == call["input_ids"][0].tolist() and not e.truncated
    assert e.turns[1].role == "observation" and e.infos[0]["call"] == {"name": "zoom"}


def test_an_observation_over_max_observation_tokens_ends_the_episode(tiny):
    model, processor = tiny
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    kwargs = dict(
        group_id=0,
        num_generations=1,
        settings=GenerationSettings(max_new_tokens=5),
        max_turns=3,
        max_context=2048,
        seed=0,
        step=1,
    )
    (short,) = generate_multiturn_group(model, processor, prompt, ZoomEnv, max_observation_tokens=5, **kwargs)
    assert [turn.role for turn in short.turns] == ["assistant"]  # the ~20-token observation never entered
    assert "max_observation_tokens=5" in str(short.end)
    (full,) = generate_multiturn_group(model, processor, prompt, ZoomEnv, max_observation_tokens=100, **kwargs)
    assert [turn.role for turn in full.turns] == ["assistant", "observation", "assistant"]
    assert full.end is None
    # why it ended, its environment time and unseen media are typed fields; reward_info keeps what rewards read
    assert full.env_seconds is not None and full.env_seconds >= 0 and full.unseen_media is None
    assert not {"ended", "env_seconds", "unseen_media"} & set(full.reward_info)


class BrokenEnv(ZoomEnv):
    """Raises on the second turn, as a buggy tool or a hostile action might."""

    def step(self, action_text: str) -> Observation:
        if self.calls >= 1:
            raise RuntimeError("tool crashed")
        return super().step(action_text)


def test_an_exception_in_the_environment_ends_the_episode_not_the_run(tiny):
    model, processor = tiny
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    trajs = generate_multiturn_group(
        model,
        processor,
        prompt,
        BrokenEnv,
        group_id=0,
        num_generations=2,
        settings=GenerationSettings(max_new_tokens=5),
        max_turns=3,
        max_context=2048,
        seed=0,
        step=1,
    )
    for t in trajs:
        assert [turn.role for turn in t.turns] == ["assistant", "observation", "assistant"]
        assert str(t.end) == "environment error: RuntimeError: tool crashed"


class SleepingEnv(ZoomEnv):
    """Its second step waits on a tool that never answers."""

    def step(self, action_text: str) -> Observation:
        if self.calls >= 1:
            time.sleep(30)
        return super().step(action_text)


class SpinningEnv(ZoomEnv):
    """Its second step loops forever in pure Python (a hostile action sending a tool into a loop)."""

    def step(self, action_text: str) -> Observation:
        if self.calls >= 1:
            while True:
                self.calls += 1
        return super().step(action_text)


@pytest.mark.parametrize("env", [SleepingEnv, SpinningEnv])
def test_a_hanging_environment_step_ends_the_episode_within_its_time_limit(tiny, env):
    model, processor = tiny
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    before = set(threading.enumerate())
    start = time.monotonic()
    (t,) = generate_multiturn_group(
        model,
        processor,
        prompt,
        env,
        group_id=0,
        num_generations=1,
        settings=GenerationSettings(max_new_tokens=5),
        max_turns=3,
        max_context=2048,
        seed=0,
        step=1,
        step_timeout_s=0.5,
    )
    assert time.monotonic() - start < 20  # not the 30 s sleep, not forever
    assert [turn.role for turn in t.turns] == ["assistant", "observation", "assistant"]
    assert str(t.end).startswith("environment error: StepTimeout: ")  # what the trainer counts
    assert "env_step_timeout_s" in str(t.end)
    if env is SpinningEnv:  # the abandoned step is stopped, not left spinning beside the run
        for spinning in [th for th in threading.enumerate() if th not in before and th.name == "mmreason-env-step"]:
            spinning.join(10)
            assert not spinning.is_alive()


def test_a_step_deadline_passes_results_and_exceptions_through():
    from mmreason.rollout.deadline import StepTimeout, call_with_deadline

    assert call_with_deadline(lambda x: x + 1, (1,), 5.0) == 2
    assert call_with_deadline(lambda x: x + 1, (1,), None) == 2
    with pytest.raises(KeyError, match="tool"):
        call_with_deadline(lambda: {}["tool"], (), 5.0)
    with pytest.raises(StepTimeout, match="0.2 s"):
        call_with_deadline(time.sleep, (5,), 0.2)


def test_evaluation_episodes_get_the_trainers_default_step_limit():
    import inspect

    from mmreason.rollout.multiturn import run_episode
    from mmreason.train.config import RolloutConfig

    limit = inspect.signature(run_episode).parameters["step_timeout_s"].default
    assert limit == RolloutConfig().env_step_timeout_s and limit is not None  # eval calls run_episode without one


class UnstartableEnv(ZoomEnv):
    def reset(self, sample: Sample) -> None:
        raise KeyError("no such video")


class SlowStartEnv(ZoomEnv):
    def reset(self, sample: Sample) -> None:
        time.sleep(30)


@pytest.mark.parametrize("env, reason", [(UnstartableEnv, "KeyError"), (SlowStartEnv, "StepTimeout")])
def test_an_environment_that_cannot_start_is_a_clear_error_naming_the_sample(tiny, env, reason):
    from mmreason.rollout.multiturn import EnvironmentStartError

    model, processor = tiny
    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    start = time.monotonic()
    with pytest.raises(EnvironmentStartError, match=f"'mt-0'.*cannot start: {reason}"):
        generate_multiturn_group(
            model,
            processor,
            prompt,
            env,
            group_id=0,
            num_generations=1,
            settings=GenerationSettings(max_new_tokens=5),
            max_turns=3,
            max_context=2048,
            seed=0,
            step=1,
            step_timeout_s=0.5,
        )
    assert time.monotonic() - start < 20
