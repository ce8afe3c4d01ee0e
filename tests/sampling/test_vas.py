"""Variance-Aware Sampling: scores against hand-worked numbers, batch composition, schedule, checkpoint restore."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mmreason.sampling import SAMPLERS, UniformSampler
from mmreason.sampling.vas import (
    VASSampler,
    distinct_n,
    minmax_weights,
    outcome_variance,
    self_bleu,
    sentence_bleu,
    trajectory_diversity,
)

# ---- scores ---------------------------------------------------------------------------------------


def test_outcome_variance_is_bernoulli_variance_of_the_pass_rate():
    assert outcome_variance([0, 1, 0, 1]) == 0.25  # P = 0.5
    assert outcome_variance([1, 1, 1, 1]) == 0.0 and outcome_variance([0, 0, 0]) == 0.0
    assert outcome_variance([0, 0, 0, 1]) == pytest.approx(0.25 * 0.75)
    assert outcome_variance([1.0]) == 0.0  # N < 2


def test_sentence_bleu_known_answers():
    # p1 = 3/4, p2 = 2/3, p3 = 1/2, equal lengths: (1/4)^(1/3)
    assert sentence_bleu("a b c d".split(), ["a b c e".split()]) == pytest.approx(0.25 ** (1 / 3))
    # no bigram / trigram match: method1 smoothing puts 0.1 in each zero numerator
    assert sentence_bleu("a b".split(), ["a c".split()]) == pytest.approx((0.5 * 0.1 * 0.1) ** (1 / 3))
    # all n-grams match but the hypothesis is shorter: brevity penalty exp(1 - 5/3)
    assert sentence_bleu("a b c".split(), ["a b c d e".split()]) == pytest.approx(math.exp(-2 / 3))
    assert sentence_bleu("x y".split(), ["a b".split()]) == 0.0  # no unigram match
    assert sentence_bleu([], ["a".split()]) == 0.0


def test_self_bleu_and_tds():
    pair = ["a b c d", "a b c e"]
    assert self_bleu(pair) == pytest.approx(0.25 ** (1 / 3))
    assert trajectory_diversity(pair) == pytest.approx(1 - 0.25 ** (1 / 3))
    same = ["the answer is 4 because", "the answer is 4 because", "the answer is 4 because"]
    assert trajectory_diversity(same) == pytest.approx(0.0, abs=1e-12)  # identical rollouts -> TDS 0
    assert trajectory_diversity(["only one"]) == 0.0
    assert trajectory_diversity(["", ""]) == 1.0  # empty responses: self-BLEU 0
    # abc, bcd, abc, bce: 3 unique of 4
    assert distinct_n(pair, 3) == 0.75 and trajectory_diversity(pair, "distinct") == 0.75
    with pytest.raises(ValueError, match="diversity"):
        trajectory_diversity(pair, "levenshtein")


def test_minmax_weights_and_uniform_fallback():
    w = minmax_weights(torch.tensor([0.1, 0.3, 0.2], dtype=torch.float64))
    assert w.tolist() == pytest.approx([0.0, 1.0, 0.5], abs=1e-6)
    assert minmax_weights(torch.full((4,), 0.2)).tolist() == [1.0] * 4  # all equal -> uniform


# ---- batch composition ------------------------------------------------------------------------------


def _one_hot_sampler(size=100, hot=7, **options) -> VASSampler:
    """Every prompt scored: ``hot`` has pass rate 0.5 (VPS 0.2), the rest always pass (VPS 0)."""
    s = VASSampler(size, seed=3, mode="rollouts", **options)
    s.refresh({i: ([0, 1, 0, 1] if i == hot else [1, 1, 1, 1], None) for i in range(size)})
    return s


def test_batch_mixes_weighted_and_uniform_draws():
    s = _one_hot_sampler(mix=0.5)
    assert s.weights[7] == pytest.approx(1.0, abs=1e-6) and float(s.weights.sum()) == pytest.approx(1.0, abs=1e-6)
    batch = s.next_indices(8)
    weighted, uniform = batch[0::2], batch[1::2]  # interleaved: weighted, uniform, weighted, ...
    assert weighted == [7, 7, 7, 7]
    assert len(set(uniform)) == 4
    assert uniform == UniformSampler(100, seed=3).next_indices(4)  # the uniform half is the seeded pass
    # a tail batch keeps the ratio: floor(0.5 * 5) = 2 weighted, 3 uniform
    tail = s.next_indices(5)
    assert [tail[0], tail[2]] == [7, 7] and len(tail) == 5


def test_mix_extremes():
    assert _one_hot_sampler(mix=1.0).next_indices(6) == [7] * 6
    assert _one_hot_sampler(mix=0.0).next_indices(6) == UniformSampler(100, seed=3).next_indices(6)


@settings(max_examples=25, deadline=None)
@given(size=st.integers(3, 40), n=st.integers(1, 30), batches=st.integers(1, 4))
def test_uniform_pool_is_a_pass_without_replacement(size, n, batches):
    s = VASSampler(size, seed=1, mix=0.5)
    drawn = []
    for _ in range(batches):
        batch = s.next_indices(n)
        assert len(batch) == n and all(0 <= i < size for i in batch)
        w = n // 2  # weighted, uniform, ..., weighted, uniform (+ one more uniform when n is odd)
        drawn += batch[1 : 2 * w : 2] + batch[2 * w :]
    expected = UniformSampler(size, seed=1).next_indices(batches * (n - n // 2))
    assert drawn == expected


# ---- schedule -----------------------------------------------------------------------------------------


def test_online_mode_rebuilds_weights_every_update_every_steps():
    s = VASSampler(10, seed=0, mode="online", update_every=2, alpha=1.0, beta=0.0)
    # step 1: prompt 0 solved half the time, prompt 1 always: scores change, weights not yet
    s.observe([0, 1], torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    assert s.scores == {0: 0.25, 1: 0.0} and s.weights.tolist() == [1.0] * 10
    s.observe([2], torch.tensor([0.0, 0.0]), torch.tensor([2, 2]))  # step 2: rebuild
    w = s.weights
    assert w[1] == 0 and w[2] == 0  # zero-variance prompts: only reachable through the uniform half
    assert w[0] == pytest.approx(1.0, abs=1e-6)
    assert all(x == pytest.approx(1.0, abs=1e-6) for x in w[3:].tolist())  # unseen: optimistic (max VPS)


def test_online_ema_and_diversity_from_completions():
    s = VASSampler(4, seed=0, mode="online", update_every=1, alpha=0.8, beta=0.2, momentum=0.5)
    s.observe([0], torch.tensor([0.0, 1.0]), torch.tensor([0, 0]), completions=["a b c d", "a b c e"])
    first = 0.8 * 0.25 + 0.2 * (1 - 0.25 ** (1 / 3))
    assert s.scores[0] == pytest.approx(first)
    s.observe([0], torch.tensor([1.0, 1.0]), torch.tensor([0, 0]), completions=["x", "x"])
    assert s.scores[0] == pytest.approx(0.5 * first + 0.5 * 0.2 * (1 - self_bleu(["x", "x"])))
    with pytest.raises(ValueError, match="align"):
        s.observe([0], torch.tensor([1.0, 1.0]), torch.tensor([0]))


def test_rollouts_mode_refresh_schedule_and_subset():
    s = VASSampler(20, seed=5, mode="rollouts", update_every=3, refresh_fraction=0.25)
    assert [step for step in range(1, 11) if s.refresh_due(step)] == [1, 4, 7, 10]
    subset = s.refresh_indices()
    assert len(subset) == 5 and subset == sorted(set(subset))
    s.refresh({i: ([0, 1], ["p", "q"]) for i in subset})
    before = dict(s.scores)
    s.observe([0], torch.tensor([0.0, 1.0]), torch.tensor([0, 0]))  # rollouts mode ignores training feedback
    assert s.scores == before and s.observed == 1
    assert s.refresh_indices() != subset  # the next refresh re-scores another subset
    assert not VASSampler(20, mode="online").refresh_due(1)
    with pytest.raises(IndexError, match="outside"):
        s.refresh({20: ([0, 1], None)})


# ---- checkpoints --------------------------------------------------------------------------------------


def test_state_dict_restore_continues_the_same_draws():
    a = VASSampler(30, seed=2, mode="online", update_every=2)
    for _ in range(5):
        batch = a.next_indices(6)
        rewards = torch.tensor([float((i * 7 + k) % 3 == 0) for i in batch for k in range(2)])
        a.observe(batch, rewards, torch.tensor([i for i in batch for _ in range(2)]))
    state = json.loads(json.dumps(a.state_dict()))  # as trainer_state.json stores it
    b = VASSampler(30, seed=2, mode="online", update_every=2)
    b.load_state_dict(state)
    assert (b.uniform.epoch, b.uniform.position) == (a.uniform.epoch, a.uniform.position) == (0, 15)  # kept
    assert torch.equal(a.weights, b.weights) and a.scores == b.scores
    for _ in range(4):
        assert a.next_indices(6) == b.next_indices(6)
    with pytest.raises(ValueError, match="30"):
        VASSampler(31).load_state_dict(state)


def test_registered_and_validated():
    s = SAMPLERS.get("vas")(12, seed=0, mix=0.25, update_every=4)
    assert isinstance(s, VASSampler) and s.mix == 0.25
    for bad in ({"mode": "epoch"}, {"mix": 1.5}, {"update_every": 0}, {"unseen": "mean"}, {"momentum": 1.0}):
        with pytest.raises(ValueError):
            VASSampler(5, **bad)
