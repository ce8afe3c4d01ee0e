"""`mmreason bench episodes`: multi-turn episodes played one at a time against played together.

The same prompts (a task pack with an environment; its eval docs), the same model, seeds and settings. One at a
time is ``run_episode`` per episode: a ``generate`` call per turn of each episode. Together is ``run_episodes``:
one call per turn for every live episode, and in the first turn each prompt encoded once for its ``--group``
episodes (as the trainer plays a step's groups). Both sides run ``repeats`` times after a warm-up; the fastest
repeat counts. ``same_tokens`` says whether every episode drew the same tokens both ways.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from mmreason.config import parse_override
from mmreason.eval.config import ModelArgs
from mmreason.eval.model import load_for_eval, resolve_model
from mmreason.eval.scoring import PromptOptions, build_prompts
from mmreason.eval.tasks import load_task
from mmreason.models.tiny import build_tiny_model
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.multiturn import EnvironmentStartError, EpisodeStart, run_episode, run_episodes
from mmreason.types import Trajectory


def bench_episodes(
    model: str | None = None,
    *,
    task: str = "medscope",
    task_args: dict[str, Any] | None = None,
    n: int = 8,
    group: int = 4,
    max_turns: int = 3,
    max_new_tokens: int = 40,
    temperature: float = 1.0,
    min_pixels: int = 3136,
    max_pixels: int = 3136,
    repeats: int = 2,
    threads: int = 1,
) -> dict[str, Any]:
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model
        if model_dir is None:
            model_dir = str(build_tiny_model(Path(tmp) / "tiny", seed=0))
        the_task = load_task(task, None, n, task_args or {})
        if the_task.pack.make_environment is None:
            raise ValueError(f"bench episodes: task {task!r} has no environment (no multi-turn episodes)")
        lm, processor = load_for_eval(resolve_model(model_dir), ModelArgs(), "cpu")
        opts = PromptOptions(min_pixels=min_pixels, max_pixels=max_pixels, max_prompt_length=4096)
        built, failed = build_prompts(processor, the_task, list(range(len(the_task.samples))), opts)
        if failed:
            raise ValueError(f"bench episodes: {len(failed)} docs do not build: {failed[0]['error']}")
        prompts = [p for _, p in built]
        env = the_task.pack.make_environment
        settings = GenerationSettings(max_new_tokens, temperature)
        kwargs: dict[str, Any] = dict(
            max_turns=max_turns, max_context=4096 + max_new_tokens * max_turns * 8, seed=0, step=1
        )

        def starts() -> list[EpisodeStart]:
            return [EpisodeStart(p, env(), g, i) for g, p in enumerate(prompts) for i in range(group)]

        def alone() -> list[Trajectory]:
            return [
                run_episode(lm, processor, s.prompt, s.env, s.group_id, settings=settings, index=s.index, **kwargs)
                for s in starts()
            ]

        def together() -> list[Trajectory | EnvironmentStartError]:
            return run_episodes(lm, processor, starts(), settings, **kwargs)

        timings: dict[str, list[float]] = {"alone": [], "together": []}
        outputs: dict[str, list] = {}
        for name, play in (("alone", alone), ("together", together)):
            play()  # warm-up
            for _ in range(repeats):
                start = time.perf_counter()
                outputs[name] = play()
                timings[name].append(time.perf_counter() - start)
    alone_s, together_s = min(timings["alone"]), min(timings["together"])
    episodes = outputs["together"]
    return {
        "task": task,
        "prompts": len(prompts),
        "episodes": len(episodes),
        "group": group,
        "max_turns": max_turns,
        "max_new_tokens": max_new_tokens,
        "temperature": temperature,
        "threads": threads,
        "model": model or "tiny (built)",
        "repeats": repeats,
        "turns_mean": sum(sum(t.role == "assistant" for t in e.turns) for e in episodes) / len(episodes),
        "alone_s": round(alone_s, 3),
        "together_s": round(together_s, 3),
        "speedup": round(alone_s / together_s, 2),
        "same_tokens": [e.token_ids.tolist() for e in outputs["alone"]] == [e.token_ids.tolist() for e in episodes],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory (default: a fresh tiny model)")
    parser.add_argument("--task", default="medscope", help="a task pack with an environment")
    parser.add_argument(
        "--task-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of its loader (YAML value), e.g. --task-arg seconds=[40,48]; repeatable",
    )
    parser.add_argument("--n", type=int, default=8, help="prompts (the task's first eval docs)")
    parser.add_argument("--group", type=int, default=4, help="episodes per prompt")
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)


def run(args: argparse.Namespace) -> int:
    import json

    options = {".".join(key): value for key, value in map(parse_override, args.task_arg)}
    result = bench_episodes(
        args.model,
        task=args.task,
        task_args=options,
        n=args.n,
        group=args.group,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        repeats=args.repeats,
        threads=args.threads,
    )
    print(json.dumps(result, indent=2))
    return 0
