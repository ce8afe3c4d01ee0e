"""Asynchronous episodes (``rollout.async_generation`` with a multi-turn environment, train/async_rollouts.py):
a weight push between two turns of an episode in flight (a partial rollout) leaves each token the version and the
log-prob of the weights that drew it, so the importance weight of each token is its own; the staleness metrics
on hand-worked versions; and a k-step-off (k = 2) MedScope run stopped with episodes drawn ahead, then resumed,
trains every drawn sample exactly once."""

from __future__ import annotations

import json
import os
import signal
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from PIL import Image

from mmreason.cli import main
from mmreason.rl.rollout_correction import importance_weights
from mmreason.rollout.environment import Observation
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings, suppressed_token_ids
from mmreason.rollout.multiturn import EpisodeStart, run_episodes
from mmreason.rollout.prompts import build_prompt
from mmreason.train.async_episodes import PolicyCopy, version_metrics
from mmreason.types import Sample, Trajectory

ROOT = Path(__file__).resolve().parents[2]


class AlwaysOn:
    """Answers every turn with the row's image (never done): every episode plays all its turns."""

    stop_strings: tuple[str, ...] = ()

    def reset(self, sample: Sample) -> None:
        self.image = sample.images[0]

    def step(self, action_text: str) -> Observation:
        return Observation(text="look again:", images=[self.image.resize((56, 56))])


def _sample() -> Sample:
    content = [{"type": "image"}, {"type": "text", "text": "What colour?"}]
    return Sample(
        id="a-0",
        messages=[{"role": "user", "content": content}],
        answer="red",
        images=[Image.new("RGB", (56, 56), "red")],
    )


def test_a_push_between_turns_continues_the_episode_under_the_new_weights(tiny):
    """Turn 0 is drawn by version 4, then the copy takes new weights (the push), turn 1 by version 5: each
    turn's tokens carry their version and the log-probs of the weights that drew them, so against the new
    policy the turn-1 tokens have importance weight 1 and the turn-0 tokens their own ratio."""
    model, processor = tiny
    engine = PolicyCopy(model)
    newer = PolicyCopy(model).model
    with torch.no_grad():
        for p in newer.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(p.numel())))
    versions = iter([4, 5])

    @contextmanager
    def gate():
        version = next(versions)
        if version == 5:
            engine.load(newer)  # the weight push lands between the two turns
        yield version

    prompt = build_prompt(processor, _sample(), max_prompt_length=1024)
    (t,) = run_episodes(
        engine.model,
        processor,
        [EpisodeStart(prompt, AlwaysOn(), 0, 0)],
        GenerationSettings(max_new_tokens=4),
        max_turns=2,
        max_context=2048,
        seed=0,
        step=3,
        with_logprobs=True,
        turn_gate=gate,
    )
    assert isinstance(t, Trajectory) and t.token_versions is not None
    first, obs, second = (t.turns[k] for k in range(3))
    assert (first.role, obs.role, second.role) == ("assistant", "observation", "assistant")
    v = t.token_versions
    assert (v[: t.prompt_length] == -1).all() and (v[obs.start : obs.end] == -1).all()
    assert (v[first.start : first.end] == 4).all() and (v[second.start : second.end] == 5).all()

    batch = collate([t], processor.tokenizer.pad_token_id)
    suppressed = suppressed_token_ids(processor.tokenizer)  # the sampler's distribution (train/update.py)
    with torch.no_grad():
        old, _ = token_logprobs(model, batch, suppressed=suppressed)  # version 4 (the copy before the push)
        new, _ = token_logprobs(newer, batch, suppressed=suppressed)  # version 5
    q = t.rollout_logprobs[None]
    turn0, turn1 = slice(first.start, first.end), slice(second.start, second.end)
    assert torch.allclose(q[0, turn0], old[0, turn0], atol=1e-4)  # drawn by the old weights
    assert torch.allclose(q[0, turn1], new[0, turn1], atol=1e-4)  # drawn by the new weights
    w = importance_weights(new, q, batch.action_mask, "token_truncate", cap=100.0)
    assert torch.allclose(w[0, turn1], torch.ones(turn1.stop - turn1.start), atol=1e-3)
    want0 = torch.exp(new[0, turn0] - old[0, turn0])
    assert torch.allclose(w[0, turn0], want0, atol=1e-3) and not torch.allclose(want0, torch.ones_like(want0))


def _traj(versions: list[int]) -> Trajectory:
    v = torch.tensor([-1, -1, *versions])
    mask = (v >= 0).long()
    return Trajectory("s", 0, torch.zeros(len(v), dtype=torch.long), mask, 2, "", token_versions=v)


def test_version_metrics_by_hand():
    """Step 5 trains the weights of the end of step 4. Rows: tokens of versions [2, 2, 3] (an episode that went on
    across a push) and [4, 4]: trajectory staleness (4-2, 4-4) -> mean 1, max 2; token staleness (2, 2, 1, 0, 0)
    -> mean 1; one of two rows partial."""
    m = version_metrics(5, [_traj([2, 2, 3]), _traj([4, 4])])
    assert m["async/staleness_mean"] == 1.0 and m["async/max_staleness"] == 2.0
    assert m["async/token_staleness_mean"] == 1.0
    assert m["async/partial_share"] == 0.5
    assert (m["async/version_min"], m["async/version_max"]) == (2.0, 4.0)


def _args(model_dir: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return [
        "train",
        str(ROOT / "configs" / "medscope" / "medscope_ga_grpo_tiny.yaml"),
        f"model.name_or_path={model_dir}",
        f"output_dir={out}",
        f"max_steps={steps}",
        "data.task_args={videos: 2, eval_videos: 2, seconds: [60, 60], size: 32}",
        "rollout.max_completion_length=4",
        "rollout.num_generations=2",
        "rollout.max_turns=2",
        "mini_batch_size=4",
        "save_steps=1",
        "log_completions_steps=1",
        "rollout.async_generation=true",
        "rollout.max_staleness=2",
        *extra,
    ]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _trained(out: Path) -> dict[int, list[str]]:
    """step -> the sample ids of its groups (one per group), the last logging of a step winning."""
    by_step: dict[int, dict[int, str]] = {}
    for row in _jsonl(out / "completions.jsonl"):
        by_step.setdefault(row["step"], {})[row["group"]] = row["sample_id"]
    return {s: sorted(groups.values()) for s, groups in by_step.items()}


def _stop_after_first_step(metrics: Path, over: threading.Event) -> threading.Thread:
    """SIGTERM to this process once the run logged its first step (the run loop notes it and stops after the
    step in progress, as ``timeout`` or SLURM would stop it); nothing once ``over`` is set."""

    def watch():
        while not over.wait(0.01):
            if metrics.exists() and metrics.read_text().strip():
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_k_step_off_episodes_stopped_in_flight_resume_without_loss_or_repeat(tiny_model_dir, shapes_cache, tmp_path):
    out, over = tmp_path / "run", threading.Event()
    watcher = _stop_after_first_step(out / "metrics.jsonl", over)
    try:
        assert main(_args(tiny_model_dir, out, 200)) == 128 + signal.SIGTERM
    finally:
        over.set()
        watcher.join()
    before = _trained(out)
    last = max(before)
    assert sorted(before) == list(range(1, last + 1)) and last < 200
    (redrawn,) = [e for e in _jsonl(out / "events.log") if e["event"] == "async_redrawn"]
    # k = 2: after step s's push the engine holds version s and steps up to s + 3 may be sampled
    # ((s + 2) - s <= 2): three steps drawn ahead, their episodes generated or in flight
    ahead = [last + 1, last + 2, last + 3]
    assert redrawn["steps"] == ahead

    assert main(_args(tiny_model_dir, out, last + 3, "resume=auto")) == 0
    after = _trained(out)
    assert sorted(after) == list(range(1, last + 4))
    assert {s: after[s] for s in before} == before  # no step trained again
    assert sorted(i for s in ahead for i in after[s]) == sorted(redrawn["sample_ids"])  # nothing lost
    # the uniform sampler's epochs: 6 samples (2 videos x 3 questions), 2 a step; every epoch trains each once
    ids = [i for s in sorted(after) for i in after[s]]
    for k in range(0, len(ids) - len(ids) % 6, 6):
        assert len(set(ids[k : k + 6])) == 6, ids
    metrics = _jsonl(out / "metrics.jsonl")
    assert all(m["async/max_staleness"] <= 2 for m in metrics if "async/max_staleness" in m)
    assert any(m["async/max_staleness"] >= 1 for m in metrics if "async/max_staleness" in m)
