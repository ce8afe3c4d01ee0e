"""The episode reward of online multi-turn rollouts (the offline, unrolled steps use ``route_step``).

    answer   R1-Router's answer rule (``recall_score``) on the episode's last ``<answer>``; 0 without one;
    routing  the fraction of positions where the episode's k-th non-answer turn (a KB, None, or a turn that
             does not parse) is the gold route's k-th KB, over max(gold steps, such turns): extra, missing and
             unparsed turns cost; an immediate answer to a question that needs no retrieval scores 1;
    format   the fraction of assistant turns that parse as a step.

Columns: ``answer``, ``gold_steps`` (the loader's ``unrolled: false`` samples).
"""

from __future__ import annotations

from mmreason.parsing import as_text
from mmreason.rewarding import column, per_sample, reward
from mmreason.rewards.accuracy import recall_score, references
from mmreason.rewards.format import assistant_turns, parse_route_step

MAX_TURN_CHARS = 20_000


def episode_steps(trajectory) -> list:
    """The parsed assistant turns (None where a turn does not parse)."""
    turns = assistant_turns(trajectory) if trajectory.turns else [as_text(trajectory.completion_text)]
    return [parse_route_step(t.strip()) if len(t) <= MAX_TURN_CHARS else None for t in turns]


@reward("mrag_episode", keys=("answer", "routing", "format"), diagnostics=("format",))
@per_sample
def mrag_episode(sample, trajectory) -> dict[str, float]:
    """Online mrag episode: answer recall of the last answer, routing agreement with the gold route, format."""
    steps = episode_steps(trajectory)
    answers = [s.answer for s in steps if s is not None and s.answer is not None]
    refs = references(column(sample, "answer"))
    answer = recall_score(answers[-1], refs) if answers and refs else 0.0
    gold = [s["kb"] for s in column(sample, "gold_steps", [])]
    chosen = [s.knowledge_base if s is not None else "unparsed" for s in steps if s is None or s.answer is None]
    span = max(len(gold), len(chosen))
    routing = 1.0 if span == 0 else sum(a == b for a, b in zip(gold, chosen)) / span
    fmt = sum(s is not None for s in steps) / len(steps) if steps else 0.0
    return {"answer": answer, "routing": routing, "format": fmt}
