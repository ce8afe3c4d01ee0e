"""Format rewards: does the completion follow the task's tag schema? 1.0 or 0.0.

All schemas have strict full-match semantics (``parsing.parse_schema``): each tag exactly once, in
order, unnested, nothing outside the tags but whitespace. That is stricter than the sources' regexes
(``re.fullmatch(r"<think>.*?</think>\\s*<answer>.*?</answer>", s, re.DOTALL)`` also accepts a second
``<think>`` inside the answer): a policy must not learn to stack tags. Bodies may be empty, so TON's
empty thought ``<think>\\n\\n</think>`` is valid.
"""

from __future__ import annotations

from mmreason.parsing import MAX_CHARS, as_text, parse_dict, parse_literal, parse_schema, tag_tokens
from mmreason.rewarding import per_sample, reward
from mmreason.types import Trajectory


def _text(trajectory: Trajectory, max_chars: int) -> str | None:
    """The completion, or None when it is too long to be a well-formed answer."""
    text = as_text(trajectory.completion_text)
    return None if len(text) > max_chars else text


# ---- think / answer (R1, TON) ------------------------------------------------------------------


def think_answer_bodies(text: str, answer_tag: str = "answer", strip: bool = True) -> tuple[str, str] | None:
    """(think body, answer body) if ``text`` is exactly ``<think>..</think> <answer>..</answer>``."""
    bodies = parse_schema(text, ("think", answer_tag), strip=strip)
    return (bodies[0], bodies[1]) if bodies else None


@reward("think_answer_format")
@per_sample
def think_answer_format(
    sample, trajectory, *, answer_tag: str = "answer", strip: bool = True, max_chars: int = MAX_CHARS
) -> float:
    """1 if the completion is exactly <think>...</think><answer>...</answer> (empty think allowed, TON).

    kwargs: ``answer_tag`` (TON's GUI task uses "action"); ``strip``: ignore whitespace around the whole
    completion (the TON source applies ``re.fullmatch`` to the raw text: set False for that).
    Source: TON ``src/r1-v/src/open_r1/grpo.py`` format reward; docs/methods/packs.md#ton.
    """
    text = _text(trajectory, max_chars)
    return float(text is not None and think_answer_bodies(text, answer_tag, strip) is not None)


# ---- tool calls (MedScope-style multi-turn) ----------------------------------------------------

TOOL_TAGS = ("think", "tool_call", "answer", "observation")


def parse_tool_call(body: str) -> dict | None:
    """A ``<tool_call>`` body as ``{"name": str, "arguments": dict}``, or None if it is not one."""
    call = parse_dict(body)
    if call is None or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):  # some chat templates serialise the arguments twice
        arguments = parse_literal(arguments)
    if not isinstance(arguments, dict):
        return None
    return {"name": call["name"], "arguments": arguments}


def assistant_turns(trajectory: Trajectory, max_chars: int = MAX_CHARS) -> list[str]:
    """The assistant turns' texts: from ``turns`` when the rollout recorded them, else the completion
    split at ``<observation>...</observation>`` blocks."""
    if trajectory.turns:
        return [as_text(t.text)[:max_chars] for t in trajectory.turns if t.role == "assistant"]
    text = as_text(trajectory.completion_text)[:max_chars]
    turns, cursor, open_at = [], 0, None
    for start, end, _, closing in tag_tokens(text, ("observation",)):
        if not closing and open_at is None:
            turns.append(text[cursor:start])
            open_at = start
        elif closing and open_at is not None:
            cursor, open_at = end, None
    turns.append(text[cursor:] if open_at is None else "")
    return [t for t in turns if t.strip()]


def tool_turn_kind(text: str) -> str | None:
    """ "call" for ``<think>..</think><tool_call>{json}</tool_call>``, "answer" for think + answer, else None."""
    bodies = parse_schema(text, ("think", "tool_call"), known=TOOL_TAGS)
    if bodies is not None:
        return "call" if parse_tool_call(bodies[1]) is not None else None
    return "answer" if parse_schema(text, ("think", "answer"), known=TOOL_TAGS) is not None else None


@reward("tool_call_format")
@per_sample
def tool_call_format(sample, trajectory, *, require_answer: bool = True, max_turns: int = 16) -> float:
    """1 if every assistant turn is think+tool_call (JSON name/arguments) and the last is think+answer.

    kwargs: ``require_answer``: the last turn must answer (False accepts a trajectory cut off after a
    call); ``max_turns``: more assistant turns than this score 0. Format: docs/methods/packs.md#medscope.
    """
    turns = assistant_turns(trajectory)
    if not turns or len(turns) > max_turns:
        return 0.0
    kinds = [tool_turn_kind(t) for t in turns]
    if any(k is None for k in kinds) or "answer" in kinds[:-1]:
        return 0.0
    return float(kinds[-1] == "answer" or not require_answer)
