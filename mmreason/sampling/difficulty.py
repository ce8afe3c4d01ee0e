"""Difficulty-aware augmentation (DeepVideo-R1, arXiv 2506.07464): make a group that was too hard easier and one that was too easy
harder, then regenerate it.

Source: "DeepVideo-R1: Video Reinforcement Fine-Tuning via Difficulty-aware Regressive GRPO" (arXiv 2506.07464),
Sec. 3.3; docs/methods/within-step.md#augment. The scaling rules are [proposed] (the paper gives their direction only).

    buffer    FIFO of the last W (100) group mean rewards
    ΔR(x)     = mean(buffer) - (1/G) sum_i r_i(x)           > 0: harder than recent prompts; < 0: easier
    d         = clip(|ΔR| / r_max, 0, 1)
    augment   only when the buffer holds >= min_buffer (20) groups, |ΔR| > threshold (0.1) * r_max and, with
              uniform_only (default), the group's rewards are all equal (no learning signal as it is)
    hard      a hint: the first f = 0.2 + 0.6 d of the words of the best earlier trace of this prompt (cut back
              to its last sentence end when there is one), cut before any occurrence of the answer (or, for
              an option letter, of the option's text), so a hint never contains the answer string; no earlier
              trace, or nothing left after the cut -> no hint
    easy      frame-level Gaussian noise on the prompt's videos: sigma = 0.3 d in [0, 1] pixel units, seeded by
              (seed, step, sample id), clamped to [0, 1]

Inside a step (``regenerate``) the plan of each group is taken from its rewards before the group joins the FIFO
(``plan`` then ``observe``); an augmented group's G rollouts, samples and reward rows are replaced by those of
the augmented prompt, rolled out under the group's own seed; a prompt that cannot be rebuilt (its media fail)
keeps its original group. ``state_dict`` holds the FIFO and each prompt's best trace, so a resumed run plans
what an uninterrupted one plans; each process keeps its own (the checkpoint holds every process's:
mmreason/train/loop.py). ``summary`` gives the logged fractions per kind and the mean strength.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmreason.sampling.records import Drawn, Rollouts
from mmreason.sampling.within_step import StepPhases
from mmreason.types import Sample

HINT_PREFIX = "Hint: "
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
MAX_TRACE_CHARS = 4_000


@dataclass(frozen=True)
class Augmentation:
    """What to change in one prompt: ``kind`` "hint" (text ``hint``) or "noise" (``noise_std`` on its frames)."""

    kind: str
    strength: float  # d in [0, 1]
    delta: float  # ΔR
    hint: str = ""
    noise_std: float = 0.0
    seed: int = 0


def answer_strings(sample: Sample) -> list[str]:
    """The strings a hint must not contain: the answer(s) and, for an option letter, that option's text."""
    answers = sample.answer if isinstance(sample.answer, (list, tuple)) else [sample.answer]
    out = [str(a).strip() for a in answers if a is not None and str(a).strip()]
    choices = sample.meta.get("choices")
    for a in list(out):
        if isinstance(choices, (list, tuple)) and len(a) == 1 and a.upper().isalpha():
            k = ord(a.upper()) - ord("A")
            if 0 <= k < len(choices):
                out.append(str(choices[k]).strip())
    return [a for a in out if a]


def _first_mention(text: str, answer: str) -> int | None:
    """Where ``answer`` first occurs in ``text`` as a whole word (case-insensitive), or None."""
    m = re.search(rf"(?<!\w){re.escape(answer)}(?!\w)", text, re.IGNORECASE)
    return None if m is None else m.start()


def hint_from_trace(trace: str, fraction: float, answers: Sequence[str]) -> str:
    """The first ``fraction`` of the trace's words, cut at its last sentence end and before any answer string."""
    words = trace.split()
    prefix = " ".join(words[: max(1, math.floor(fraction * len(words)))]) if words else ""
    ends = [m.end() for m in _SENTENCE_END.finditer(prefix)]
    if ends:
        prefix = prefix[: ends[-1]]
    for answer in answers:
        where = _first_mention(prefix, answer)
        if where is not None:
            prefix = prefix[:where]
    prefix = prefix.strip()
    if any(_first_mention(prefix, a) is not None for a in answers):  # the check the docstring promises
        raise AssertionError("hint still contains the answer")
    return prefix


class DifficultyAugmenter:
    """The FIFO of group mean rewards, each prompt's best trace, and the plan for one group (module doc)."""

    def __init__(
        self,
        *,
        window: int = 100,
        min_buffer: int = 20,
        r_max: float = 1.0,
        threshold: float = 0.1,
        hint_min: float = 0.2,
        hint_span: float = 0.6,
        noise_max: float = 0.3,
        uniform_only: bool = True,
        seed: int = 0,
    ) -> None:
        if window < 1 or min_buffer < 1 or min_buffer > window or r_max <= 0:
            raise ValueError("difficulty augmentation: need 1 <= min_buffer <= window and r_max > 0")
        self.window, self.min_buffer, self.r_max, self.threshold = window, min_buffer, r_max, threshold
        self.hint_min, self.hint_span, self.noise_max = hint_min, hint_span, noise_max
        self.uniform_only, self.seed = uniform_only, seed
        self.buffer: deque[float] = deque(maxlen=window)
        self.best: dict[str, tuple[float, str]] = {}  # sample id -> (reward, trace) of its best rollout so far

    def delta(self, rewards: Sequence[float]) -> float | None:
        """ΔR of a group against the buffer; None while the buffer holds fewer than ``min_buffer`` groups."""
        if len(self.buffer) < self.min_buffer or not rewards:
            return None
        return math.fsum(self.buffer) / len(self.buffer) - math.fsum(rewards) / len(rewards)

    def observe(self, sample_id: str, rewards: Sequence[float], completions: Sequence[str]) -> None:
        """Add the group's mean reward to the FIFO and keep its best trace (the first of the highest reward)."""
        if not rewards:
            return
        self.buffer.append(math.fsum(rewards) / len(rewards))
        k = max(range(len(rewards)), key=lambda i: (rewards[i], -i))
        if sample_id not in self.best or rewards[k] > self.best[sample_id][0]:
            self.best[sample_id] = (float(rewards[k]), str(completions[k])[:MAX_TRACE_CHARS])

    def plan(self, sample: Sample, rewards: Sequence[float], step: int) -> Augmentation | None:
        """The augmentation of this group (before ``observe`` adds it to the buffer), or None."""
        delta = self.delta(rewards)
        if delta is None or abs(delta) <= self.threshold * self.r_max:
            return None
        if self.uniform_only and max(rewards) != min(rewards):
            return None
        d = min(1.0, abs(delta) / self.r_max)
        if delta > 0:
            trace = self.best.get(sample.id)
            if trace is None:
                return None
            hint = hint_from_trace(trace[1], self.hint_min + self.hint_span * d, answer_strings(sample))
            return Augmentation("hint", d, delta, hint=hint) if hint else None
        if not sample.videos:
            return None
        seed = int.from_bytes(hashlib.sha256(f"{self.seed}/{step}/{sample.id}".encode()).digest()[:4], "little")
        return Augmentation("noise", d, delta, noise_std=self.noise_max * d, seed=seed)

    @staticmethod
    def apply(sample: Sample, aug: Augmentation) -> Sample:
        """A copy of ``sample`` with the hint appended to its last user text, or noise set on its videos."""
        if aug.kind == "noise":
            videos = [
                dataclasses.replace(v, noise_std=aug.noise_std, noise_seed=aug.seed + k)
                for k, v in enumerate(sample.videos)
            ]
            return dataclasses.replace(sample, videos=videos)
        messages = [dict(m) for m in sample.messages]
        for message in reversed(messages):
            if message.get("role") != "user":
                continue
            content = message["content"]
            if isinstance(content, str):
                message["content"] = f"{content}\n{HINT_PREFIX}{aug.hint}"
            else:
                message["content"] = [*content, {"type": "text", "text": f"\n{HINT_PREFIX}{aug.hint}"}]
            break
        return dataclasses.replace(sample, messages=messages)

    @staticmethod
    def summary(plans: Sequence[Augmentation | None]) -> dict[str, float]:
        """Logged per step: fraction of groups hinted / noised, mean strength of the augmented ones."""
        n = max(1, len(plans))
        done = [p for p in plans if p is not None]
        return {
            "augment/frac_hint": sum(p.kind == "hint" for p in done) / n,
            "augment/frac_noise": sum(p.kind == "noise" for p in done) / n,
            "augment/strength_mean": math.fsum(p.strength for p in done) / len(done) if done else 0.0,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": list(self.buffer), "best": {k: list(v) for k, v in self.best.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer = deque((float(x) for x in state["buffer"]), maxlen=self.window)
        self.best = {k: (float(v[0]), str(v[1])) for k, v in state["best"].items()}


def regenerate(phases: StepPhases, got: Rollouts) -> Rollouts:
    """``got`` after regenerating the groups the run's augmenter picks (on a step's first round only)."""
    aug: DifficultyAugmenter = phases.run.augmenter
    total = got.totals(phases.run.cfg.reward_missing)  # [N]
    plans: dict[int, Augmentation | None] = {}

    def augmented(d: Drawn, rows: list[int]) -> Sample | None:
        rewards = [total[i] for i in rows if not math.isnan(total[i])]
        plan = plans[d.slot] = aug.plan(d.prompt.sample, rewards, phases.step) if rewards else None
        if rewards:
            aug.observe(d.prompt.sample.id, rewards, [got.trajectories[i].completion_text for i in rows])
        return aug.apply(d.prompt.sample, plan) if plan is not None else None

    built = phases.rebuilt(got, augmented)
    done = {d.slot for d in built}
    metrics = aug.summary([plans[d.slot] if d.slot in done else None for d in got.prompts])
    out = phases.redone(got, built)
    return (out if out is not None else got).with_metrics(metrics)
