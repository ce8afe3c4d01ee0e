"""R1-Router's step format and the offline unrolling of a gold trajectory into step prompts (Step-GRPO).

A gold trajectory is ``steps`` (each ``{sub_question, kb, answer?}``) then the final answer. Unrolled, step
``k`` (0-based) becomes its own prompt: the question (+ image), the gold history of steps ``0..k-1``
(``Sub-question1: ..`` / ``Answer1: ..``) and the instruction; its target is

    <think>..</think><sub-question>q_k</sub-question><ret>KB_k</ret>      (k < len(steps), step_type "ret")
    <think>..</think><answer>answer</answer>                               (k = len(steps),  step_type "ans")

so a trajectory with ``S`` gold steps gives ``S + 1`` prompts, ``step_index`` 0..S, each its own group.
Source: R1-Router (Peng et al.) ``src/prompt.py``, ``Easy-R1/verl/utils/rl_dataset.py``;
docs/methods/packs.md#r1-router.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmreason.tasks.mrag.route import KNOWLEDGE_BASES

TEXT, TEXT_IMAGE, TABLE, NONE = KNOWLEDGE_BASES
INSTRUCTION = (
    "Answer the question step by step, asking one knowledge base at a time. If something is still missing, "
    "reply <think>what is still missing</think><sub-question>one single-hop question</sub-question>"
    "<ret>one of: Text Retriever, Text Image Retriever, Table Retriever, None</ret>. "
    "If you can answer now, reply <think>why</think><answer>the short answer</answer>."
)


@dataclass(frozen=True)
class GoldStep:
    sub_question: str
    kb: str
    answer: str | None = None  # the intermediate answer shown in later steps' history


def parse_steps(value: Any, where: str) -> list[GoldStep]:
    """A row's ``steps`` column -> GoldSteps; ValueError naming ``where`` for anything malformed."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{where}: steps is {type(value).__name__}, not a list of {{sub_question, kb}}")
    out = []
    for k, step in enumerate(value):
        if not isinstance(step, dict):
            raise ValueError(f"{where}: step {k + 1} is not a mapping")
        question, kb = step.get("sub_question"), step.get("kb")
        if not isinstance(question, str) or not question.strip():
            raise ValueError(f"{where}: step {k + 1} has no sub_question")
        if kb not in KNOWLEDGE_BASES:
            raise ValueError(f"{where}: step {k + 1} kb {kb!r} is not one of {', '.join(KNOWLEDGE_BASES)}")
        answer = step.get("answer")
        out.append(GoldStep(question.strip(), kb, None if answer is None else str(answer)))
    return out


def history_text(steps: list[GoldStep]) -> str:
    """The gold history shown at the next step: ``Sub-question1: ..\\nAnswer1: ..`` per earlier step."""
    lines = []
    for k, step in enumerate(steps, start=1):
        lines.append(f"Sub-question{k}: {step.sub_question}")
        if step.answer is not None:
            lines.append(f"Answer{k}: {step.answer}")
    return "\n".join(lines)


def step_prompt(question: str, history: list[GoldStep]) -> str:
    past = history_text(history)
    return f"Question: {question}\n" + (f"{past}\n" if past else "") + INSTRUCTION


def gold_think(step: GoldStep | None) -> str:
    """A short analysis for the SFT target (rows may give their own ``think``): what is missing, no answer."""
    if step is None:
        return "The question and what was found so far are enough to answer."
    if step.kb == NONE:
        return "Nothing more needs to be looked up."
    return f"Still missing: {step.sub_question[0].lower() + step.sub_question[1:]}"


def render_step(think: str, sub_question: str | None = None, kb: str | None = None, answer: str | None = None) -> str:
    """The step as the model writes it (the SFT target and the exact gold output)."""
    if answer is not None:
        return f"<think>{think}</think><answer>{answer}</answer>"
    return f"<think>{think}</think><sub-question>{sub_question}</sub-question><ret>{kb}</ret>"


@dataclass(frozen=True)
class UnrolledStep:
    step_index: int
    prompt: str
    step_type: str  # "ret" | "ans"
    sub_question: str | None
    knowledge_base: str | None
    target: str


def unroll(question: str, steps: list[GoldStep], answer: str, thinks: list[str] | None = None) -> list[UnrolledStep]:
    """The ``len(steps) + 1`` step prompts of one gold trajectory, histories growing by one step each."""
    out = []
    for k in range(len(steps) + 1):
        step = steps[k] if k < len(steps) else None
        think = thinks[k] if thinks and k < len(thinks) and thinks[k] else gold_think(step)
        if step is None:
            target = render_step(think, answer=answer)
            out.append(UnrolledStep(k, step_prompt(question, steps[:k]), "ans", None, None, target))
        else:
            target = render_step(think, step.sub_question, step.kb)
            out.append(UnrolledStep(k, step_prompt(question, steps[:k]), "ret", step.sub_question, step.kb, target))
    return out
