"""Evaluation in a task's environment: each doc is one multi-turn episode, as in training.

A pack with an environment (``TaskPack.make_environment``) is evaluated through ``run_episodes`` when its
episode length (``--gen_kwargs max_turns=N``, default the pack's ``max_turns``) is above 1, a batch of docs
played together (``--batch_size``): the model's turns
are generated greedily (or sampled, seeded per doc), the environment answers each tool call, and the metrics
score the model's own text (observations stand as empty markers, as for rewards). The samples file records
each episode's turns: what every tool call asked and what the environment returned (timestamps, errors; never
pixels), and why the episode ended.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from mmreason.eval.generate import Completion
from mmreason.eval.tasks import EvalTask
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.multiturn import EpisodeStart, run_episodes
from mmreason.rollout.prompts import PromptInputs
from mmreason.types import Trajectory

if TYPE_CHECKING:
    from transformers import ProcessorMixin


def episode_turns(task: EvalTask, max_turns: int | None) -> int:
    """Assistant turns of one eval episode of ``task`` (1 = single-turn generation)."""
    if task.pack.make_environment is None:
        return 1
    return int(max_turns if max_turns is not None else task.pack.max_turns)


def _plain(value: Any, depth: int = 0) -> Any:
    """An observation's info as JSON: numbers, strings, lists and dicts (anything else as its type name)."""
    if depth > 4:
        return "..."
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value if not isinstance(value, str) else value[:300]
    if isinstance(value, (list, tuple)):
        return [_plain(v, depth + 1) for v in value[:64]]
    if isinstance(value, dict):
        return {str(k)[:40]: _plain(v, depth + 1) for k, v in list(value.items())[:32]}
    return type(value).__name__


def run_episode_docs(
    model: Any,
    processor: ProcessorMixin,
    prompts: list[PromptInputs],
    task: EvalTask,
    settings: GenerationSettings,
    *,
    max_turns: int,
    max_prompt_length: int,
    seed: int,
    image_budget: tuple[int | None, int | None] | None = None,
) -> list[tuple[Completion, dict[str, Any]] | Exception]:
    """Each doc's episode, all played together (one generate call per turn): the completion the metrics score
    and the episode's record for the samples file, or the ``EnvironmentStartError`` of a doc whose environment
    could not start."""
    make_environment = task.pack.make_environment
    if not prompts:
        return []
    assert make_environment is not None  # episode_turns is 1 for a pack without one: never called then
    starts = [EpisodeStart(p, make_environment(), 0, 0, key=p.sample.id) for p in prompts]
    max_context = max_prompt_length + settings.max_new_tokens * max_turns * 8  # observations fit; env bounds them
    results = run_episodes(
        model,
        processor,
        starts,
        settings,
        max_turns=max_turns,
        max_context=max_context,
        seed=seed,
        step=0,
        image_budget=image_budget,
    )
    return [r if isinstance(r, Exception) else _record(r) for r in results]


def _record(traj: Trajectory) -> tuple[Completion, dict[str, Any]]:
    infos = traj.reward_info.get("observations") or []
    turns, k = [], 0
    for turn in traj.turns:
        if turn.role == "assistant":
            turns.append({"assistant": turn.text[:2_000]})
            info = infos[k] if k < len(infos) else {}
            k += 1
            if info:
                turns[-1]["environment"] = _plain(info)
        else:
            turns[-1]["observation"] = turn.text[:2_000]
    completion = Completion(traj.token_ids[traj.action_mask.bool()], traj.completion_text, traj.truncated)
    return completion, {
        "episode": {
            "turns": turns,
            "ended": None if traj.end is None else str(traj.end),
            "tool_calls": sum(1 for i in infos if i and "name" in i and "error" not in i),
            "bad_tool_calls": sum(1 for i in infos if i and "error" in i),
        }
    }
