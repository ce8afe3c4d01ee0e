"""Math answers checked symbolically with math-verify (Hugging Face), as TON and open-r1 do.

math-verify's own timeouts use ``signal.alarm``, which only works in the main thread, while the reward
runner calls rewards in worker threads. So the timeouts are off there and the work is bounded here
instead: the answer text is short (the last ``<answer>`` / ``\\boxed{}`` / the completion's tail), and a
parsed expression is refused before ``verify`` evaluates it when it holds towers of powers, huge
exponents or factorials (``9^{9^{9^9}}`` would otherwise run for ever). A Python power ``3**2`` is read as
``3^2`` (math-verify alone reads it as 3).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from typing import Any

from mmreason.parsing import as_text, final_answer, squeeze_space
from mmreason.rewarding import column, per_sample, reward

_PY_POWER = re.compile(r"(?<=[\w)\]}])\*\*(?=[\w(\[{])")  # a ** between operands (not **bold**)
MAX_ANSWER_CHARS = 1_000
MAX_NODES = 400
MAX_POWER_DIGITS = 10_000  # a power whose result would have more decimal digits is refused
MAX_SYMBOLIC_EXPONENT = 64  # larger integer powers of symbolic bases are refused


class _DropTimeoutNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


_filter_installed = False


def _math_verify():
    global _filter_installed
    import math_verify

    if not _filter_installed:  # one notice per call otherwise: the runner bounds time itself
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutNotice())
        _filter_installed = True
    return math_verify


def _magnitude_digits(node: Any) -> float:
    """Rough decimal digits of a numeric sympy node (inf when unknown/huge)."""
    try:
        value = abs(float(node))
    except (TypeError, ValueError, OverflowError):
        return math.inf
    return math.log10(value) + 1 if value > 1 else 1.0


def is_tame(expr: Any) -> bool:
    """False for sympy expressions whose evaluation could take unbounded time or memory."""
    try:
        return _is_tame(expr)
    except Exception:  # an expression too odd to inspect is refused, never raised
        return False


def _is_tame(expr: Any) -> bool:
    import sympy

    if isinstance(expr, str):
        return True
    nodes = list(sympy.preorder_traversal(expr))
    if len(nodes) > MAX_NODES:
        return False
    for node in nodes:
        if isinstance(node, sympy.Pow):
            if node.exp.has(sympy.Pow) and node.base.is_number and node.exp.is_number:
                return False  # a power tower
            if node.exp.is_number:
                exp_value = _magnitude_digits(node.exp)
                if exp_value == math.inf or exp_value > 6:
                    return False
                if not node.base.is_number and abs(float(node.exp)) > MAX_SYMBOLIC_EXPONENT:
                    return False  # (1 + x)^100000 is expanded term by term
                if node.base.is_number and abs(float(node.exp)) * _magnitude_digits(node.base) > MAX_POWER_DIGITS:
                    return False
        if isinstance(node, (sympy.factorial, sympy.binomial, sympy.gamma, sympy.RisingFactorial)):
            if any(a.is_number and _magnitude_digits(a) > 4 for a in node.args):
                return False
        if isinstance(node, sympy.Integer) and int(node).bit_length() > 3.33 * MAX_POWER_DIGITS:
            return False
    return True


def _parse(text: str, mv: Any, timeout: int | None) -> list:
    # Python's power ``3**2`` as LaTeX's ``3^2``: math-verify's LaTeX reader takes ``3**2`` as 3
    text = _PY_POWER.sub("^", squeeze_space(text[:MAX_ANSWER_CHARS]))
    parsed = mv.parse(text, parsing_timeout=timeout)  # long runs: slow
    return [p for p in parsed if is_tame(p)] if all(is_tame(p) for p in parsed) else []


def math_equal(prediction: str, reference: str) -> bool:
    """True if math-verify finds the prediction equal to the reference (both bounded, see module doc)."""
    mv = _math_verify()
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    gold = _parse(reference if "$" in reference or "\\" in reference else f"${reference}$", mv, timeout)
    pred = _parse(prediction, mv, timeout)
    if not gold or not pred:
        return False
    try:
        return bool(mv.verify(gold, pred, timeout_seconds=timeout))
    except Exception:
        return False


@reward("math")
@per_sample
def math_reward(sample, trajectory, *, extract: str = "auto", string_fallback: bool = True):
    """1 if math-verify finds the answer equal to the reference (TON/open-r1 math accuracy), else 0.

    Columns: ``answer`` (LaTeX or plain, e.g. "\\frac{1}{2}" or "0.5"). The answer is the last
    ``<answer>`` body, else ``\\boxed{}``, else the completion's tail; with ``string_fallback`` an exact
    match of the stripped answer text also counts (TON's fallback). None without a reference.
    Source: TON ``src/r1-v/src/open_r1/grpo.py::accuracy_reward``; docs/methods/packs.md#ton.
    """
    ref = column(sample, "answer")
    if ref is None or not as_text(ref).strip():
        return None
    ref = as_text(ref).strip()
    answer = final_answer(trajectory.completion_text, extract, max_chars=MAX_ANSWER_CHARS)
    if not answer:
        return 0.0
    if string_fallback and answer == ref:
        return 1.0
    candidate = answer if ("$" in answer or "\\boxed" in answer) else f"${answer}$"
    return float(math_equal(candidate, ref))
