"""String similarity used by the accuracy and retrieval rewards: edit distance, ANLS, VQA normalisation,
token overlap. Pure functions of strings; no registration here.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from mmreason.parsing import MAX_CHARS

MAX_COMPARE_CHARS = 20_000  # strings are clipped to this before edit distance (bit-parallel, so cheap)


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute; each costs 1) between ``a`` and ``b``.

    Myers' bit-parallel algorithm in Hyyro's formulation ("A bit-vector algorithm for computing
    Levenshtein and Damerau edit distances", 2003): the DP column of the shorter string is held in the
    bits of Python integers, so the cost is O(len(longer) * len(shorter) / 64) word operations.
    """
    if a == b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    peq: dict[str, int] = {}
    for i, ch in enumerate(b):
        peq[ch] = peq.get(ch, 0) | (1 << i)
    full = (1 << m) - 1
    top = 1 << (m - 1)
    pv, mv, score = full, 0, m
    for ch in a:
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = ((((eq & pv) + pv) & full) ^ pv) | eq
        ph = (mv | ~(xh | pv)) & full
        mh = pv & xh
        if ph & top:
            score += 1
        elif mh & top:
            score -= 1
        ph = ((ph << 1) | 1) & full
        mh = (mh << 1) & full
        pv = (mh | ~(xv | ph)) & full
        mv = ph & xv
    return score


def _collapse(text: str) -> str:
    """Lower-cased, stripped, every run of whitespace (any Unicode space) one ASCII space."""
    return " ".join(text.lower().split())


def anls_score(prediction: str, references: list[str] | str, threshold: float = 0.5) -> float:
    """Average Normalized Levenshtein Similarity of one prediction (lmms-eval's ANLS, padding-proof).

        NL(ref) = lev(norm(ref), norm(pred)) / max(len(norm(ref)), len(norm(pred)))
        score   = 1 - min_ref NL(ref);  score := 0 if score < threshold

    ``norm`` lower-cases, strips and collapses whitespace, and the distance and its denominator are
    taken on the same normalised strings. lmms-eval (``lmms_eval/api/metrics.py::anls``, from Qwen-VL's
    ``infographicsvqa_eval.py``) divides by the *raw* lengths, so whitespace padding lengthens the
    denominator without adding distance: 'berlin' + 60 spaces scores 0.91 against 'paris' there, 0 here.
    On strings without surplus whitespace the two agree. Each string is normalised whole, then clipped
    to ``MAX_COMPARE_CHARS`` (so padding cannot push content out of the compared part).
    Threshold 0.5 is the DocVQA evaluation rule; DocSeeker's RL answer reward uses threshold 0.
    """
    refs = [references] if isinstance(references, str) else [str(r) for r in references]
    if not refs:
        return 0.0
    det = _collapse(prediction)[:MAX_COMPARE_CHARS]
    values = []
    for ref in refs:
        gt = _collapse(ref)[:MAX_COMPARE_CHARS]
        length = max(len(gt), len(det))
        values.append(0.0 if length == 0 else levenshtein(gt, det) / length)
    score = 1.0 - min(values)
    return 0.0 if score < threshold else score


# ---- VQA normalisation -------------------------------------------------------------------------
# After the official VQA evaluation script (vqaEval.py, Antol et al. 2015): lower-case, punctuation
# handling, number words to digits, articles dropped, common contractions restored.

_CONTRACTIONS = {
    "arent": "aren't",
    "cant": "can't",
    "couldnt": "couldn't",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hadnt": "hadn't",
    "hasnt": "hasn't",
    "havent": "haven't",
    "hes": "he's",
    "isnt": "isn't",
    "itd": "it'd",
    "itll": "it'll",
    "lets": "let's",
    "mightnt": "mightn't",
    "mustnt": "mustn't",
    "shes": "she's",
    "shouldnt": "shouldn't",
    "thats": "that's",
    "theres": "there's",
    "theyre": "they're",
    "theyve": "they've",
    "wasnt": "wasn't",
    "werent": "weren't",
    "whats": "what's",
    "wheres": "where's",
    "whos": "who's",
    "wont": "won't",
    "wouldnt": "wouldn't",
    "youre": "you're",
    "youve": "you've",
    "im": "i'm",
    "ive": "i've",
}
_NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
_ARTICLES = {"a", "an", "the"}
_PUNCT = re.compile(r"[;/\[\]\"{}()=+\\_\-><@`,?!*#%^&$~|:]")
_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
_COMMA_NUMBER = re.compile(r"(\d)(,)(\d)")


def vqa_normalize(text: str, max_chars: int = 2_000) -> str:
    """An answer normalised the VQA way: '  The Two dogs!' -> '2 dogs'.

    The whole text (up to ``parsing.MAX_CHARS``) is normalised first and the result clipped to
    ``max_chars`` after, so whitespace or punctuation padding cannot push the rest of an answer out of
    the compared part (and so out of a token count).
    """
    text = text[:MAX_CHARS].lower()
    text = _COMMA_NUMBER.sub(r"\1\3", text)
    text = _PUNCT.sub(" ", text.replace("'", ""))
    text = _PERIOD.sub("", text)
    words = []
    for word in text.split():
        word = _NUMBER_WORDS.get(word, word)
        if word in _ARTICLES:
            continue
        words.append(_CONTRACTIONS.get(word, word))
    return " ".join(words)[:max_chars]


def token_f1(prediction: str, reference: str) -> float:
    """SQuAD-style bag-of-tokens F1 of two (already normalised) strings; 1.0 when both are empty."""
    pred, ref = prediction.split(), reference.split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def token_recall(prediction: str, reference: str) -> float:
    """Fraction of the reference's tokens (with multiplicity) found in the prediction."""
    pred, ref = prediction.split(), reference.split()
    if not ref:
        return float(not pred)
    return sum((Counter(pred) & Counter(ref)).values()) / len(ref)


def tfidf_cosine(a: str, b: str, corpus: list[str]) -> float:
    """Cosine similarity of the TF-IDF vectors of ``a`` and ``b``; IDF from ``corpus`` (+ a and b).

    Smoothed IDF, ``log((1 + n) / (1 + df)) + 1`` (scikit-learn's default), raw term counts.
    """
    docs = [d.split() for d in corpus] + [a.split(), b.split()]
    df: Counter = Counter()
    for doc in docs:
        df.update(set(doc))
    n = len(docs)

    def vector(tokens: list[str]) -> dict[str, float]:
        return {t: c * (math.log((1 + n) / (1 + df[t])) + 1) for t, c in Counter(tokens).items()}

    va, vb = vector(a.split()), vector(b.split())
    dot = sum(w * vb.get(t, 0.0) for t, w in va.items())
    na, nb = math.sqrt(sum(w * w for w in va.values())), math.sqrt(sum(w * w for w in vb.values()))
    if na == 0 or nb == 0:
        return float(na == nb)
    return dot / (na * nb)
