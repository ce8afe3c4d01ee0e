"""Replay of a written multi-turn trajectory through its environment, for SFT on tool trajectories.

A pack's SFT target for a multi-turn task is the text of every assistant turn, concatenated. It is cut into
turns after each of the environment's stop strings; each turn is tokenized and trained (``action_mask`` 1), and
between turns the environment really runs the turn's tool call, so the observation the model learns to read
is the one it will get in a rollout (encoded exactly as ``run_episode`` encodes it, ``action_mask`` 0). The
last turn ends with ``turn_end`` (the chat template's end of an assistant turn), which the model must learn
to emit. A target the environment refuses (an error observation, or the episode ending early) is an error
naming the sample: the written trajectory is wrong, not the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from mmreason.rollout.deadline import DEFAULT_STEP_TIMEOUT_S
from mmreason.rollout.environment import Environment
from mmreason.rollout.multiturn import ImageBudget, close_environment, encode_observation, fit_images
from mmreason.rollout.prompts import PromptInputs
from mmreason.types import Trajectory, Turn

if TYPE_CHECKING:
    from transformers import ProcessorMixin


def split_turns(text: str, stop_strings: tuple[str, ...]) -> list[str]:
    """Cut ``text`` after every stop string (the last piece keeps whatever follows the last one)."""
    turns, cursor = [], 0
    while True:
        ends = [(i + len(s)) for s in stop_strings if (i := text.find(s, cursor)) >= 0]
        if not ends:
            break
        end = min(ends)
        turns.append(text[cursor:end])
        cursor = end
    if text[cursor:].strip() or not turns:
        turns.append(text[cursor:])
    return turns


def replay_episode(
    processor: ProcessorMixin,
    prompt: PromptInputs,
    env: Environment,
    target: str,
    turn_end: str,
    *,
    index: int = 0,
    image_budget: ImageBudget | None = None,
) -> Trajectory:
    """Build prompt + the target's turns with the environment's observations between them (module doc); observation
    images over ``image_budget`` are fitted into it, as in a rollout. The environment's optional ``close()`` is called
    after (a served environment ends its session)."""
    try:
        return _replay(processor, prompt, env, target, turn_end, index=index, image_budget=image_budget)
    finally:
        close_environment(env, DEFAULT_STEP_TIMEOUT_S)


def _replay(
    processor: ProcessorMixin,
    prompt: PromptInputs,
    env: Environment,
    target: str,
    turn_end: str,
    *,
    index: int = 0,
    image_budget: ImageBudget | None = None,
) -> Trajectory:
    tokenizer = processor.tokenizer
    sample = prompt.sample
    turns = split_turns(target, tuple(getattr(env, "stop_strings", ())))
    env.reset(sample)
    ids, types = prompt.input_ids.clone(), prompt.mm_token_type_ids.clone()  # [P]
    mask = torch.zeros_like(ids)
    visual = [prompt.visual] if prompt.visual else []
    record: list[Turn] = []
    for k, text in enumerate(turns):
        last = k == len(turns) - 1
        action = tokenizer(text + (turn_end if last else ""), add_special_tokens=False, return_tensors="pt")[
            "input_ids"
        ][0]  # [A]
        record.append(Turn("assistant", text, int(ids.numel()), int(ids.numel() + action.numel())))
        ids, types = torch.cat([ids, action]), torch.cat([types, torch.zeros_like(action)])
        mask = torch.cat([mask, torch.ones_like(action)])
        if last:
            break
        obs = env.step(text)
        if obs.info.get("error") or obs.done:
            reason = obs.info.get("error") or "the episode ended"
            raise ValueError(
                f"sample {sample.id!r}: the environment refuses turn {k + 1} of the SFT target "
                f"({text[:120]!r}): {reason}"
            )
        obs_ids, obs_types, obs_visual = encode_observation(processor, fit_images(obs, image_budget), closed=False)
        record.append(Turn("observation", obs.text, int(ids.numel()), int(ids.numel() + obs_ids.numel())))
        ids, types = torch.cat([ids, obs_ids]), torch.cat([types, obs_types])
        mask = torch.cat([mask, torch.zeros_like(obs_ids)])
        if obs_visual:
            visual.append(obs_visual)
    completion = "".join(t.text if t.role == "assistant" else "\n<observation></observation>\n" for t in record)
    return Trajectory(
        sample.id, index, ids, mask, prompt.length, completion, turns=record, mm_token_type_ids=types, visual=visual
    )
