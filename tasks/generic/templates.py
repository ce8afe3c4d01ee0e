"""Prompt templates (EasyR1's ``format_prompt``): a Jinja template applied to the user text before the model's
chat template. ``prompt_template`` is a built-in name or a ``.jinja`` file (relative to the working folder);
the template sees ``content`` (the row's user text, placeholders included).

    plain         the text as it is
    think_boxed   think in <think></think>, then the final answer in \\boxed{}
    think_answer  think in <think></think>, then the final answer in <answer></answer>
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

from mmreason.files import MAX_TEMPLATE_BYTES, read_text

BUILTIN = {
    "plain": "{{ content }}",
    "think_boxed": (
        "{{ content | trim }} You FIRST think about the reasoning process as an internal monologue "
        "and then provide the final answer. The reasoning process MUST BE enclosed within <think> "
        "</think> tags. The final answer MUST BE put in \\boxed{}."
    ),
    "think_answer": (
        "{{ content | trim }} Think about the question step by step inside <think> </think> tags, "
        "then give the final answer inside <answer> </answer> tags."
    ),
}


@lru_cache(maxsize=16)
def template(name: str) -> jinja2.Template:
    """The template of a built-in name or a ``.jinja`` file; ValueError naming the option otherwise."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)
    if name in BUILTIN:
        return env.from_string(BUILTIN[name])
    path = Path(name)
    if not path.is_file():
        raise ValueError(f"prompt_template={name!r}: not a built-in ({', '.join(BUILTIN)}) nor a template file")
    try:
        return env.from_string(read_text(path, "prompt template", MAX_TEMPLATE_BYTES))
    except jinja2.TemplateSyntaxError as err:
        raise ValueError(f"prompt_template {name!r}: line {err.lineno}: {err.message}") from None


def render(name: str, content: str) -> str:
    try:
        return template(name).render(content=content)
    except jinja2.UndefinedError as err:
        raise ValueError(f"prompt_template {name!r}: {err.message} (a template sees only 'content')") from None


def answer_style(name: str) -> str:
    """How the template asks for the answer: ``boxed``, ``answer_tag`` or ``plain`` (a file: by its text)."""
    text = BUILTIN.get(name) or (read_text(name, "prompt template", MAX_TEMPLATE_BYTES) if Path(name).is_file() else "")
    if "<think>" in text and "boxed" in text:
        return "think_boxed"
    if "<think>" in text and "<answer>" in text:
        return "think_answer"
    return "plain"


def target_text(name: str, answer: str, reasoning: str = "") -> str:
    """The SFT text for a gold answer in the template's answer format."""
    style = answer_style(name)
    if style == "think_boxed":
        return f"<think>{reasoning}</think> \\boxed{{{answer}}}"
    if style == "think_answer":
        return f"<think>{reasoning}</think> <answer>{answer}</answer>"
    return answer
