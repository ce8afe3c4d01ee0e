"""The MRAG pack's rewards: its default list (``REWARDS``) and its own rewards (registered when the pack's rewards
load):

- ``route_format``: 1 if the completion is one valid R1-Router step (``route.parse_route_step``);
- ``route_step``: R1-Router's step reward of the unrolled steps (Step-GRPO), below;
- ``mrag_episode``: the episode reward of online multi-turn rollouts, below.

R1-Router's step reward for routing queries across knowledge bases (Step-GRPO).

An intermediate step emits ``<think/><sub-question>q</sub-question><ret>KB</ret>`` and scores

    R_ret = 0.5 * sim(q, q*) + 0.5 * 1[KB == KB*]

(0 when the step does not parse, names an unknown KB or several). The final step emits
``<think/><answer/>`` and scores R1-Router's answer rule (``accuracy.recall_score``); with
``answer_decision_weight = w > 0`` it scores ``w * 1[it answers] + (1 - w) * recall``, so that on a final step
answering (the right route) outscores asking a knowledge base even while the answer itself is wrong (the paper
uses w = 0: there a wrong answer and a needless retrieval both score 0).

``sim`` is the paper's cosine of dense embeddings (BGE-M3) when ``embedding_model`` names a local
``from_pretrained`` directory; by default a lexical stand-in that needs no model: token F1 of the
VQA-normalised questions (``similarity="token_f1"``) or the cosine of TF-IDF vectors with IDF from the
batch's questions (``similarity="tfidf"``). Similarities are clamped to [0, 1] (docs/methods/packs.md#r1-router).

The episode reward of online multi-turn rollouts (the offline, unrolled steps use ``route_step``).

    answer   R1-Router's answer rule (``recall_score``) on the episode's last ``<answer>``; 0 without one;
    routing  the fraction of positions where the episode's k-th non-answer turn (a KB, None, or a turn that
             does not parse) is the gold route's k-th KB, over max(gold steps, such turns): extra, missing and
             unparsed turns cost; an immediate answer to a question that needs no retrieval scores 1;
    format   the fraction of assistant turns that parse as a step.

Columns: ``answer``, ``gold_steps`` (the loader's ``unrolled: false`` samples).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from mmreason.parsing import MAX_CHARS, as_text
from mmreason.rewarding import column, per_sample, reward
from mmreason.rewards.accuracy import recall_score, references
from mmreason.rewards.format import assistant_turns
from mmreason.rewards.textmatch import tfidf_cosine, token_f1, vqa_normalize
from mmreason.tasks.mrag.route import parse_route_step
from mmreason.types import Sample, Trajectory

# The paper trains on the step reward alone (its parse failures score 0: a format gate); route_format is logged.
REWARDS = [
    {"name": "route_step", "weight": 1.0},  # similarity and kb_match are logged diagnostics (weight 0)
    {"name": "route_format", "weight": 0.0},
]

MAX_STEP_CHARS = 20_000
_ENCODERS: dict[tuple[str, str], Any] = {}
_ENCODERS_LOCK = threading.Lock()


def step_type(sample: Sample) -> str:
    """ "ret" or "ans": the ``step_type`` column, else "ret" when the sample has a gold knowledge base."""
    kind = column(sample, "step_type")
    if kind in ("ret", "ans"):
        return kind
    return "ret" if column(sample, "knowledge_base") is not None else "ans"


def _encoder(path: str, device: str):
    key = (path, device)
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            from transformers import AutoModel, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModel.from_pretrained(path).to(device).eval()
            _ENCODERS[key] = (tokenizer, model)
        return _ENCODERS[key]


@torch.no_grad()
def embed(texts: list[str], path: str, pooling: str = "cls", device: str = "cpu") -> torch.Tensor:
    """L2-normalised sentence embeddings ``[B, D]`` from a local encoder (BGE-M3 pools the CLS token)."""
    tokenizer, model = _encoder(path, device)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt").to(device)
    hidden = model(**batch).last_hidden_state  # [B, L, D]
    if pooling == "mean":
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # [B, L, 1]
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)  # [B, D]
    else:
        pooled = hidden[:, 0]  # [B, D]
    return torch.nn.functional.normalize(pooled.float(), dim=-1)


def similarities(
    predicted: list[str], gold: list[str], method: str, embedding_model: str | None, pooling: str, device: str
) -> list[float]:
    """sim(predicted[i], gold[i]) for each pair, clamped to [0, 1]."""
    if not predicted:
        return []
    if embedding_model:
        vectors = embed(predicted + gold, embedding_model, pooling, device)  # [2B, D]
        n = len(predicted)
        sims = (vectors[:n] * vectors[n:]).sum(-1).tolist()  # [B]
    elif method == "tfidf":
        corpus = [vqa_normalize(q) for q in predicted + gold]
        sims = [tfidf_cosine(vqa_normalize(p), vqa_normalize(g), corpus) for p, g in zip(predicted, gold)]
    elif method == "token_f1":
        sims = [token_f1(vqa_normalize(p), vqa_normalize(g)) for p, g in zip(predicted, gold)]
    else:
        raise ValueError(f"similarity must be 'token_f1' or 'tfidf' (or give embedding_model), got {method!r}")
    return [min(1.0, max(0.0, s)) for s in sims]


@reward("route_step", keys=("step", "similarity", "kb_match"), diagnostics=("similarity", "kb_match"))
def route_step(
    samples: list[Sample],
    trajectories: list[Trajectory],
    *,
    similarity: str = "token_f1",
    embedding_model: str | None = None,
    pooling: str = "cls",
    device: str = "cpu",
    question_weight: float = 0.5,
    strict_words: int = 5,
    answer_decision_weight: float = 0.0,
) -> dict[str, list[float | None]]:
    """R1-Router step reward: 0.5 sub-question similarity + 0.5 KB match; final steps: answer recall.

    Columns: ``sub_question`` (gold sub-question, may be "None"), ``knowledge_base`` (gold KB: "Text
    Retriever", "Text Image Retriever", "Table Retriever" or "None"), ``answer`` (final steps),
    ``step_type`` ("ret" / "ans"; optional, see ``step_type``). ``answer_decision_weight``: the share of a
    final step's score given for answering at all (default 0, the paper's). Sub-scores: ``step`` (weighted),
    ``similarity`` and ``kb_match`` (logged; None on final steps). Source: R1-Router (Peng et al.),
    ``Easy-R1/verl/utils/reward_score/step.py``; docs/methods/packs.md#r1-router.
    """
    if not 0.0 <= answer_decision_weight <= 1.0:
        raise ValueError(f"answer_decision_weight must be in [0, 1], got {answer_decision_weight}")
    n = len(samples)
    step: list[float | None] = [0.0] * n
    sim: list[float | None] = [None] * n
    kb: list[float | None] = [None] * n
    pending: list[tuple[int, str, str]] = []  # (index, predicted sub-question, gold sub-question)
    for i, (sample, trajectory) in enumerate(zip(samples, trajectories)):
        text = as_text(trajectory.completion_text)
        parsed = parse_route_step(text) if len(text) <= MAX_STEP_CHARS else None
        if step_type(sample) == "ans":
            refs = references(column(sample, "answer"))
            if not refs:
                step[i] = None
            elif parsed is not None and parsed.answer is not None:
                recall = recall_score(parsed.answer, refs, strict_words)
                step[i] = answer_decision_weight + (1 - answer_decision_weight) * recall
            continue
        gold_kb = str(column(sample, "knowledge_base", "None")).strip()
        if parsed is None or parsed.sub_question is None:
            sim[i], kb[i] = 0.0, 0.0
            continue
        kb[i] = float(parsed.knowledge_base == gold_kb)
        pending.append((i, parsed.sub_question, str(column(sample, "sub_question", "None"))))
    scores = similarities(
        [p for _, p, _ in pending], [g for _, _, g in pending], similarity, embedding_model, pooling, device
    )
    for (i, _, _), s in zip(pending, scores):
        sim[i] = s
        step[i] = question_weight * s + (1 - question_weight) * kb[i]
    return {"step": step, "similarity": sim, "kb_match": kb}


@reward("route_format")
@per_sample
def route_format(sample, trajectory, *, max_chars: int = MAX_CHARS) -> float:
    """1 if the completion is a valid R1-Router step: think+sub-question+ret(one known KB) or think+answer.

    Source: R1-Router ``src/prompt.py`` step format; docs/methods/packs.md#r1-router.
    """
    text = as_text(trajectory.completion_text)
    return float(len(text) <= max_chars and parse_route_step(text) is not None)


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
