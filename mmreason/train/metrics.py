"""What one GRPO step logs about its rollouts, reduced over processes, and the sampled-completion rows."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import torch
from accelerate.utils import gather_object

from mmreason import rl
from mmreason.parsing import final_answer
from mmreason.rollout.visibility import media_paths
from mmreason.train.setup import Run
from mmreason.train.table import StepTable


def rollout_metrics(run: Run, s: StepTable) -> dict[str, float | str]:
    m: dict[str, float] = {}
    lengths = torch.tensor([float(t.completion_length) for t in s.trajectories])
    m["reward/mean"] = float(s.total.mean())
    m["reward/std"] = float(s.total.std(unbiased=False))
    for k, name in enumerate(s.reward_names):
        col = s.rewards[:, k]
        valid = col[~torch.isnan(col)]
        m[f"rewards/{name}/mean"] = float(valid.mean()) if valid.numel() else float("nan")
        m[f"rewards/{name}/std"] = float(valid.std(unbiased=False)) if valid.numel() else float("nan")
        # share of trajectories with no value in this column: the reward said "does not apply" (None / NaN)
        # or its call failed (reward_on_error: none); times the step's trajectories, it is a count
        m[f"reward_missing/{name}"] = 1.0 - valid.numel() / max(col.numel(), 1)
    if s.tasks:
        for name in sorted(set(s.tasks)):
            rows = torch.tensor([t == name for t in s.tasks])
            m[f"reward/{name}/mean"] = float(s.total[rows].mean())
            m[f"completion/{name}/length_mean"] = float(lengths[rows].mean())
    gids = torch.tensor([t.group_id for t in s.trajectories])
    zero_std = rl.dynamic_sampling_filter(s.total, gids)
    m["frac_reward_zero_std"] = zero_std.num_dropped / max(zero_std.num_groups, 1)
    m["completion/length_mean"] = float(lengths.mean())
    m["completion/length_max"] = float(lengths.max())
    m["completion/clipped_ratio"] = float(sum(t.truncated for t in s.trajectories) / len(s.trajectories))
    assert s.advantages is not None  # set by the advantage phase
    m["advantage/abs_mean"] = float(s.advantages.abs().mean())
    top, m["answers/top_share"], m["answers/gold_top_share"], m["answers/golds"] = answer_spread(run, s)
    out: dict[str, float | str] = {**_reduce_across_processes(run, m)}
    out["answers/top"] = top  # this process's (a string: not averaged)
    return out


def answer_spread(run: Run, s: StepTable) -> tuple[str, float, float, float]:
    """Return (most common parsed final answer, its share of the completions, the most common gold answer's share of the
    groups, distinct gold answers): the answer-collapse alarm's inputs (``mmreason.health``)."""
    parse = run.pack.extract_answer or final_answer

    def answer(text: str) -> str:
        try:
            return " ".join(str(parse(text) or "").lower().split())[:200]
        # a pack parser failing on hostile output is no answer, not a crash
        except Exception:  # noqa: BLE001
            return ""

    answers = Counter(answer(t.completion_text) for t in s.trajectories)
    golds = Counter(
        str(sample.answer).strip().lower()
        for sample in {t.group_id: smp for t, smp in zip(s.trajectories, s.samples)}.values()
    )
    ((top, count),) = answers.most_common(1)
    return (
        top,
        count / max(len(s.trajectories), 1),
        golds.most_common(1)[0][1] / max(sum(golds.values()), 1),
        float(len(golds)),
    )


def _reduce_across_processes(run: Run, m: dict[str, float]) -> dict[str, float]:
    """Average each metric over the processes that have it (per-task keys can differ between ranks)."""
    if run.accelerator.num_processes == 1:
        return m

    per_rank = gather_object([m])
    keys = sorted({k for d in per_rank for k in d})
    return {k: sum(d[k] for d in per_rank if k in d) / sum(k in d for d in per_rank) for k in keys}


def completion_rows(s: StepTable, limit: int = 16) -> list[dict[str, Any]]:
    assert s.advantages is not None  # set by the advantage phase
    rows = []
    for t, sample, r, total, a in zip(
        s.trajectories, s.samples, s.rewards.tolist(), s.total.tolist(), s.advantages.tolist()
    ):
        rows.append(
            {
                "sample_id": t.sample_id,
                "group": t.group_id,
                "prompt": sample.prompt_text,
                "answer": sample.answer,
                "completion": t.transcript,
                "reward": total,
                "advantage": a,
                "rewards": dict(zip(s.reward_names, [None if math.isnan(x) else x for x in r])),
                "media": media_paths(sample),
                "truncated": t.truncated,
                **({"turns": [{"role": u.role, "text": u.text} for u in t.turns]} if len(t.turns) > 1 else {}),
            }
        )
    return rows[:limit]
