"""Scoring of the MedScope pack: the answer reward, the format reward and the eval metrics.

Answer (``medscope_accuracy``), by task type:

    qa                   1 / 0: the option letter (mcq), the number (rel_tol 1e-4) or the word (VQA-normalised)
    temporal_grounding   tIoU of the answered span with the evidence window(s)
    grounded_qa          mean of the qa rule and the tIoU of the ``<span>`` (a span in the answer earns nothing)

Format (``medscope_format``): 1 when the episode ends in an ``<answer>``, times the fraction of tool turns the
environment accepted (a call that did not parse, named an unknown tool, fell outside the video or the budgets
counts against it); 0 without an answer. Grounding comes from the pack's ``tool_grounding`` reward (``rewards.py``:
crop tIoU, timestamp hits with decay, long windows scaled down; its ``fidelity`` feeds GA-GRPO's weights).

Eval metrics read the model's own text (tool calls are its ``<tool_call>`` bodies): accuracy (a span is
correct at tIoU >= 0.5), grounded accuracy (correct, and the answered span or one tool call touches the
evidence), mIoU and R@0.3 / 0.5 / 0.7 on span-answering questions, tool calls per episode, and the fraction of
calls that touch the evidence.
"""

from __future__ import annotations

from mmreason.parsing import all_tag_bodies, clip, final_answer, last_tag_body
from mmreason.rewarding import per_sample
from mmreason.rewards.accuracy import typed_answer_correct
from mmreason.rewards.evidence import gold_spans, span_tiou, tiou
from mmreason.rewards.format import parse_tool_call
from mmreason.tasks.medscope.rewards import crop_window, frame_time
from mmreason.types import Sample

SPAN_THRESHOLD = 0.5
RECALL_THRESHOLDS = (0.3, 0.5, 0.7)


def span_iou(sample: Sample, completion: str) -> float:
    """tIoU of the answered span with the best evidence window (0 when no span can be read).

    A temporal-grounding answer is the span; a grounded question's span is its ``<span>`` only, never a span
    written in place of the answer (which would earn span credit for not answering the question)."""
    text = clip(completion)
    if last_tag_body(text, "answer") is None:
        return 0.0
    if sample.meta.get("task_type") == "grounded_qa" and not last_tag_body(text, "span"):
        return 0.0  # the span reader would fall back to the answer
    return span_tiou(sample.meta.get("span"), completion) or 0.0


def text_correct(sample: Sample, completion: str) -> float:
    """1.0 / 0.0 for the non-span answer (mcq letter, number, word)."""
    kind, ref = sample.meta.get("answer_kind"), str(sample.answer)
    answer = last_tag_body(clip(completion), "answer")
    if answer is None:
        return 0.0
    pred = final_answer(f"<answer>{answer}</answer>")
    return float(typed_answer_correct(pred, ref, kind, sample.meta.get("choices")))


def answer_score(sample: Sample, completion: str) -> float:
    """The answer reward (module doc): qa 0/1, temporal grounding tIoU, grounded QA their mean."""
    task = sample.meta.get("task_type")
    if task == "temporal_grounding":
        return span_iou(sample, completion)
    if task == "grounded_qa":
        return 0.5 * text_correct(sample, completion) + 0.5 * span_iou(sample, completion)
    return text_correct(sample, completion)


def is_correct(sample: Sample, completion: str) -> float:
    """Accuracy: the text answer is right (a temporal-grounding span at tIoU >= 0.5)."""
    if sample.meta.get("task_type") == "temporal_grounding":
        return float(span_iou(sample, completion) >= SPAN_THRESHOLD)
    return text_correct(sample, completion)


def calls_in_text(completion: str, limit: int = 64) -> list[dict | None]:
    """The completion's ``<tool_call>`` bodies, parsed (None where one does not parse)."""
    return [parse_tool_call(b) for b in all_tag_bodies(clip(completion), "tool_call", limit)]


def call_hits(call: dict | None, spans: list) -> bool:
    """Does a crop window overlap an evidence window (tIoU > 0), or a frame time lie inside one?"""
    if call is None or not spans:
        return False
    if call["name"] == "crop_video" and (window := crop_window(call["arguments"])) is not None:
        return any(tiou(window, g) > 0 for g in spans)
    if call["name"] == "get_frame" and (t := frame_time(call["arguments"])) is not None:
        return any(s <= t <= e for s, e in spans)
    return False


def grounded_correct(sample: Sample, completion: str) -> float:
    spans = gold_spans(sample.meta.get("span"))
    touched = span_iou(sample, completion) > 0 or any(call_hits(c, spans) for c in calls_in_text(completion))
    return float(is_correct(sample, completion) and touched)


# ---- rewards -------------------------------------------------------------------------------------


@per_sample
def medscope_accuracy(sample, trajectory) -> float:
    """Answer reward: qa 1/0, temporal grounding tIoU of the span, grounded QA the mean of both."""
    return answer_score(sample, trajectory.completion_text)


@per_sample
def medscope_format(sample, trajectory) -> float:
    """1 for an episode that ends in <answer>, times the fraction of tool turns the environment accepted."""
    text = clip(trajectory.completion_text)
    if last_tag_body(text, "answer") is None:
        return 0.0
    observations = (trajectory.reward_info or {}).get("observations")
    infos = [i for i in observations or [] if i and ("name" in i or "error" in i)]  # the tool turns
    if not observations:  # no recorded episode (a single-turn run): the calls written in the text
        calls = calls_in_text(text)
        return sum(c is not None for c in calls) / len(calls) if calls else 1.0
    return sum("error" not in i for i in infos) / len(infos) if infos else 1.0


# ---- eval metrics: fn(sample, completion) -> float (NaN = does not apply) ----------------------------


def medscope_metric_accuracy(sample: Sample, completion: str) -> float:
    """Answer accuracy (a temporal-grounding span is correct at tIoU >= 0.5)."""
    return is_correct(sample, completion)


def medscope_metric_grounded_accuracy(sample: Sample, completion: str) -> float:
    """Correct, and the answered span or a tool call touches the evidence window."""
    return grounded_correct(sample, completion)


def _answers_span(sample: Sample) -> bool:
    return sample.meta.get("task_type") in ("temporal_grounding", "grounded_qa")


def medscope_metric_miou(sample: Sample, completion: str) -> float:
    """tIoU of the answered span (questions that answer a span): its mean is mIoU."""
    return span_iou(sample, completion) if _answers_span(sample) else float("nan")


def recall_at(threshold: float):
    def metric(sample: Sample, completion: str) -> float:
        return float(span_iou(sample, completion) >= threshold) if _answers_span(sample) else float("nan")

    metric.__name__ = metric.__qualname__ = f"medscope_metric_recall_{threshold}"
    metric.__doc__ = f"R@{threshold}: the answered span's tIoU >= {threshold}."
    return metric


def attempted_calls(completion: str, limit: int = 64) -> int:
    """``<tool_call>`` tags the model opened (a call it never closed or that does not parse counts too)."""
    return min(limit, clip(completion).count("<tool_call>"))


def medscope_metric_tool_calls(sample: Sample, completion: str) -> float:
    """Tool calls attempted in the episode (valid or not)."""
    return float(attempted_calls(completion))


def medscope_metric_grounded_calls(sample: Sample, completion: str) -> float:
    """Fraction of the episode's attempted tool calls that touch the evidence (NaN without a call)."""
    attempted = attempted_calls(completion)
    spans = gold_spans(sample.meta.get("span"))
    hits = sum(call_hits(c, spans) for c in calls_in_text(completion))
    return min(hits, attempted) / attempted if attempted else float("nan")


METRICS = {
    "accuracy": medscope_metric_accuracy,
    "grounded_accuracy": medscope_metric_grounded_accuracy,
    "miou": medscope_metric_miou,
    **{f"r@{t}": recall_at(t) for t in RECALL_THRESHOLDS},
    "tool_calls": medscope_metric_tool_calls,
    "grounded_calls": medscope_metric_grounded_calls,
}
HIGHER_IS_BETTER = {"tool_calls": True}
