"""Multi-turn rollouts: assistant turns interleaved with environment observations.

Tokens are appended, never re-tokenized: the sampled ids of every assistant turn are kept exactly
(action_mask 1) and each observation is rendered as a user turn by the checkpoint's chat template and encoded by
the processor (visual pads expanded, action_mask 0). The trajectory ends when the model stops without
a tool call, the environment says done, ``max_turns`` is reached, or the context would exceed its limit.
An exception in ``Environment.step``, or a step running past ``step_timeout_s`` (``deadline.py``), ends the
episode with ``reward_info["ended"]`` starting "environment error" (the trainer counts it), never the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import torch

from mmreason.rollout.chat_turns import next_turn
from mmreason.rollout.deadline import DEFAULT_STEP_TIMEOUT_S, call_with_deadline
from mmreason.rollout.environment import Environment, Observation
from mmreason.rollout.generate import (
    GenerationSettings,
    cut_at_eos,
    eos_token_ids,
    group_seed,
    sample_tokens,
)
from mmreason.rollout.prompts import VISUAL_KEYS, PromptInputs, encode
from mmreason.types import Trajectory, Turn


class EnvironmentStartError(ValueError):
    """``Environment.reset`` raised or ran past the step time limit: no episode of that sample can run."""


def observation_content(obs: Observation) -> list[dict]:
    """An observation as chat-template content parts: its images, its videos, then its text."""
    return ([{"type": "image"}] * len(obs.images) + [{"type": "video"}] * len(obs.videos)
            + [{"type": "text", "text": obs.text}])


def observation_text(processor, obs: Observation, closed: bool) -> str:
    """The tokens between two assistant turns, as the checkpoint's chat template renders them."""
    eos = processor.tokenizer.eos_token or ""
    return next_turn(processor, observation_content(obs), closed, eos)


def encode_observation(processor, obs: Observation, closed: bool) -> tuple[torch.Tensor, torch.Tensor, dict]:
    out = encode(processor, observation_text(processor, obs, closed), obs.images, obs.videos, obs.video_metadata)
    ids = out["input_ids"][0]
    types = out.get("mm_token_type_ids")
    types = types[0].long() if types is not None else torch.zeros_like(ids)
    return ids, types, {k: out[k] for k in VISUAL_KEYS if k in out}


def run_episode(model, processor, prompt: PromptInputs, env: Environment, group_id: int,
                settings: GenerationSettings, max_turns: int, max_context: int, seed: int, step: int,
                index: int, key: str | None = None, max_observation_tokens: int | None = None,
                step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S) -> Trajectory:
    """One trajectory of up to ``max_turns`` assistant turns against ``env``. An observation longer than
    ``max_observation_tokens`` (text + visual tokens), or one that would overflow ``max_context``, ends it;
    so does a ``step`` that raises or runs past ``step_timeout_s`` seconds (default 60; None: no limit)."""
    tokenizer = processor.tokenizer
    eos = eos_token_ids(tokenizer)
    env_started = time.perf_counter()
    try:
        call_with_deadline(env.reset, (prompt.sample,), step_timeout_s, what="reset")
    except Exception as exc:  # the sample cannot be played: the trainer counts it as a broken sample
        raise EnvironmentStartError(f"sample {prompt.sample.id!r}: the environment cannot start: "
                                    f"{type(exc).__name__}: {str(exc)[:500]}") from exc
    env_seconds = time.perf_counter() - env_started  # reset and steps: the environment's share of the episode
    ids, types = prompt.input_ids.clone(), prompt.mm_token_type_ids.clone()
    mask = torch.zeros_like(ids)
    visual = [prompt.visual] if prompt.visual else []
    turns: list[Turn] = []
    truncated, infos, seen, ended = False, [], [], None
    for turn in range(max_turns):
        merged = _merge_visual(visual)
        new = sample_tokens(model, tokenizer, ids, types, merged, 1, settings,
                            group_seed(seed, step, f"{key or prompt.sample.id}#{index}", turn))[0]
        action, truncated = cut_at_eos(new, eos, tokenizer.pad_token_id)
        text = tokenizer.decode(action, skip_special_tokens=True)
        start = int(ids.numel())
        ids = torch.cat([ids, action])
        types = torch.cat([types, torch.zeros_like(action)])
        mask = torch.cat([mask, torch.ones_like(action)])
        turns.append(Turn("assistant", text, start, int(ids.numel())))
        ended_with_eos = action.numel() > 0 and int(action[-1]) in eos
        truncated = truncated and not any(text.endswith(s) for s in settings.stop_strings)
        stepped = time.perf_counter()
        try:
            # the environment decides what a finished, stopped or cut turn means
            obs = call_with_deadline(env.step, (text,), step_timeout_s)
        except Exception as exc:  # an environment bug or a hostile action ends this episode, never the run
            ended = f"environment error: {type(exc).__name__}: {str(exc)[:500]}"
            break
        finally:
            env_seconds += time.perf_counter() - stepped
        infos.append(obs.info)
        if obs.done or turn == max_turns - 1:
            break
        obs_ids, obs_types, obs_visual = encode_observation(processor, obs, closed=ended_with_eos)
        if max_observation_tokens is not None and obs_ids.numel() > max_observation_tokens:
            ended = f"observation of {obs_ids.numel()} tokens > max_observation_tokens={max_observation_tokens}"
            break
        if ids.numel() + obs_ids.numel() + settings.max_new_tokens > max_context:
            break
        turns.append(Turn("observation", obs.text, int(ids.numel()), int(ids.numel() + obs_ids.numel())))
        ids = torch.cat([ids, obs_ids])
        types = torch.cat([types, obs_types])
        mask = torch.cat([mask, torch.zeros_like(obs_ids)])
        if obs_visual:
            visual.append(obs_visual)
        seen.extend(obs.images)  # what the model was actually shown
    # Rewards score the model's own text: observations stand as empty markers (Trajectory.transcript has them)
    completion = "".join(t.text if t.role == "assistant" else "\n<observation></observation>\n" for t in turns)
    return Trajectory(
        sample_id=prompt.sample.id, group_id=group_id, token_ids=ids, action_mask=mask,
        prompt_length=prompt.length, completion_text=completion, truncated=truncated, turns=turns,
        tool_calls=[i for i in infos if i], mm_token_type_ids=types, visual=visual,
        reward_info={"observations": infos, "observation_images": seen, "ended": ended,
                     "env_seconds": env_seconds},
    )


def _merge_visual(chunks: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    merged: dict[str, list[torch.Tensor]] = {}
    for chunk in chunks:
        for k, v in chunk.items():
            merged.setdefault(k, []).append(v)
    return {k: torch.cat(v, dim=0) for k, v in merged.items()}


def generate_multiturn_group(model, processor, prompt: PromptInputs, make_env: Callable[[], Environment],
                             group_id: int, num_generations: int, settings: GenerationSettings,
                             max_turns: int, max_context: int, seed: int, step: int,
                             key: str | None = None, max_observation_tokens: int | None = None,
                             step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S) -> list[Trajectory]:
    """G episodes of one prompt, each against a fresh environment; turns end at EOS or a stop string."""
    trajectories = []
    for i in range(num_generations):
        env = make_env()
        turn_settings = replace(settings, stop_strings=tuple(getattr(env, "stop_strings", ())))
        trajectories.append(run_episode(model, processor, prompt, env, group_id, turn_settings, max_turns,
                                        max_context, seed, step, i, key, max_observation_tokens, step_timeout_s))
    return trajectories
