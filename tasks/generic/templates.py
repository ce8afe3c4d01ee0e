"""Prompt templates (EasyR1's ``format_prompt``): a Jinja template applied to the user text before the model's
chat template. ``prompt_template`` is a built-in name or a ``.jinja`` file (relative to the working folder);
the template sees ``content`` (the row's user text, placeholders included). Every template is rendered in
Jinja's sandbox within a time and a size bound (``mmreason.templating``): a file can neither reach Python's
internals nor take the run's memory or time.

    plain         the text as it is
    think_boxed   think in <think></think>, then the final answer in \\boxed{}
    think_answer  think in <think></think>, then the final answer in <answer></answer>
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

from mmreason import templating

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
    """The template of a built-in name or a ``.jinja`` file, compiled in the bounded sandbox and rendered
    once on a short text (so a template that loops past its time bound, or that the sandbox refuses, fails
    before any row instead of on every row); ValueError naming the option otherwise."""
    if name in BUILTIN:
        return templating.compile_template(BUILTIN[name])
    path = Path(name)
    if not path.is_file():
        raise ValueError(f"prompt_template={name!r}: not a built-in ({', '.join(BUILTIN)}) nor a template file")
    try:
        compiled = templating.compile_template(path.read_text(encoding="utf-8"))
    except jinja2.TemplateSyntaxError as err:
        raise ValueError(f"prompt_template {name!r}: line {err.lineno}: {err.message}") from None
    except (templating.TemplateLimit, UnicodeDecodeError) as err:
        raise ValueError(f"prompt_template {name!r}: {err}") from None
    _render(name, compiled, "What is 1 + 1? <image>")
    return compiled


def render(name: str, content: str) -> str:
    """``content`` through the template, in the sandbox and within its bounds (ValueError naming the
    template otherwise: an undefined variable, what the sandbox refuses, a bound passed)."""
    return _render(name, template(name), content)


def _render(name: str, compiled: jinja2.Template, content: str) -> str:
    try:
        return templating.render(compiled, {"content": content})
    except jinja2.UndefinedError as err:
        raise ValueError(f"prompt_template {name!r}: {err.message} (a template sees only 'content')") from None
    except jinja2.exceptions.SecurityError as err:
        raise ValueError(f"prompt_template {name!r}: refused by the sandbox: {err}") from None
    except templating.TemplateLimit as err:
        raise ValueError(f"prompt_template {name!r}: {err}") from None


def answer_style(name: str) -> str:
    """How the template asks for the answer: ``boxed``, ``answer_tag`` or ``plain`` (a file: by its text)."""
    text = BUILTIN.get(name) or (Path(name).read_text(encoding="utf-8") if Path(name).is_file() else "")
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
