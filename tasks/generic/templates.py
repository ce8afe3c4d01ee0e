"""Prompt templates (EasyR1's ``format_prompt``): a Jinja template applied to the user text before the model's
chat template. ``prompt_template`` is a built-in name or a ``.jinja`` file (relative to the working folder);
the template sees ``content`` (the row's user text, placeholders included). Every template is rendered in
Jinja's sandbox within a time and a size bound (``mmreason.templating``): a file can neither reach Python's
internals nor take the run's memory or time.

    plain         the text as it is
    think_boxed   think in <think></think>, then the final answer in \\boxed{}
    think_answer  think in <think></think>, then the final answer in <answer></answer>

A row whose text (or system prompt) already asks for an answer format (it names ``<think>``, ``\\boxed`` or ``<answer>``: verl's
preprocessed parquets append EasyR1's think / ``\\boxed{}`` instruction, verl's Video-R1 rows "Put your answer
in <answer></answer>") keeps its own: ``think_boxed`` / ``think_answer`` are not added to it a second time, and
its answer format is read from its text (``row_style``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import jinja2

from mmreason import templating
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


THINK_TEMPLATES = ("think_boxed", "think_answer")  # the built-ins that ask for a format (not added twice)
_ASKS = re.compile(r"<think>|\\boxed|<answer>")


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
        compiled = templating.compile_template(read_text(path, "prompt template", MAX_TEMPLATE_BYTES))
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


def row_style(name: str, content: str, system: str | None = None) -> str | None:
    """The answer format a row's own text (its user text or system prompt) asks for when it asks for one and
    ``name`` is a think template (then the template is not applied: ``think_boxed``, ``think_answer`` or
    ``plain`` for a bare ``<answer>`` ask); None otherwise."""
    text = f"{system or ''}\n{content}"
    if name not in THINK_TEMPLATES or not _ASKS.search(text):
        return None
    return _style_of(text)


def render_row(name: str, content: str, system: str | None = None) -> tuple[str, str]:
    """(the user text the model sees, the answer format asked for): the template applied, unless the row
    carries its own answer-format instruction (``row_style``)."""
    own = row_style(name, content, system)
    if own is not None:
        return content, own
    return render(name, content), answer_style(name)


def _style_of(text: str) -> str:
    if "<think>" in text and "boxed" in text:
        return "think_boxed"
    if "<think>" in text and "<answer>" in text:
        return "think_answer"
    return "plain"


def answer_style(name: str) -> str:
    """How the template asks for the answer: ``boxed``, ``answer_tag`` or ``plain`` (a file: by its text)."""
    text = BUILTIN.get(name) or (read_text(name, "prompt template", MAX_TEMPLATE_BYTES) if Path(name).is_file() else "")
    return _style_of(text)


def target_text(style: str, answer: str, reasoning: str = "") -> str:
    """The SFT text for a gold answer in an answer format (``answer_style`` / ``row_style``)."""
    if style == "think_boxed":
        return f"<think>{reasoning}</think> \\boxed{{{answer}}}"
    if style == "think_answer":
        return f"<think>{reasoning}</think> <answer>{answer}</answer>"
    return answer
