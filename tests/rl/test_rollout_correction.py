"""Truncated importance sampling and the rollout-trainer mismatch metrics, on values worked by hand."""

from __future__ import annotations

import math

import pytest
import torch

from mmreason.rl.rollout_correction import importance_weights, mismatch_metrics, vision_distance

LN2 = math.log(2.0)


def _rows():
    """Two rows of three tokens; row 1's last token is padding (mask 0).

    trainer - rollout log-prob differences (p - q):
        row 0: [ln 2, 0, -ln 2]   -> token ratios [2, 1, 0.5], sequence ratio 2 * 1 * 0.5 = 1
        row 1: [ln 4, ln 2, (pad)] -> token ratios [4, 2, -],   sequence ratio 4 * 2 = 8
    """
    q = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    d = torch.tensor([[LN2, 0.0, -LN2], [2 * LN2, LN2, 5.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return q + d, q, mask


def test_token_truncate_caps_each_token():
    """cap 3: min(r, 3) -> row 0 [2, 1, 0.5]; row 1 [3, 2, 0 (pad)]."""
    p, q, m = _rows()
    w = importance_weights(p, q, m, "token_truncate", cap=3.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 0.5], [3.0, 2.0, 0.0]]), atol=1e-6)


def test_token_mask_drops_tokens_over_the_cap():
    """cap 3: r if r <= 3 else 0 -> row 1's first token (ratio 4) gets weight 0."""
    p, q, m = _rows()
    w = importance_weights(p, q, m, "token_mask", cap=3.0)
    assert torch.allclose(w, torch.tensor([[2.0, 1.0, 0.5], [0.0, 2.0, 0.0]]), atol=1e-6)


def test_sequence_modes_use_the_product_of_token_ratios():
    """Sequence ratios 1 (row 0) and 8 (row 1), the pad's difference (5.0) not counted.
    cap 3, truncate: [1, 1, 1] and [3, 3, 0]; mask: [1, 1, 1] and [0, 0, 0]."""
    p, q, m = _rows()
    trunc = importance_weights(p, q, m, "sequence_truncate", cap=3.0)
    assert torch.allclose(trunc, torch.tensor([[1.0, 1.0, 1.0], [3.0, 3.0, 0.0]]), atol=1e-5)
    masked = importance_weights(p, q, m, "sequence_mask", cap=3.0)
    assert torch.allclose(masked, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]), atol=1e-5)


def test_weights_carry_no_gradient_and_bad_options_fail():
    p, q, m = _rows()
    p.requires_grad_(True)
    assert not importance_weights(p, q, m).requires_grad
    with pytest.raises(ValueError, match="vllm_importance_sampling_mode"):
        importance_weights(p, q, m, "token_clip")
    with pytest.raises(ValueError, match="cap"):
        importance_weights(p, q, m, cap=0.0)


def test_mismatch_metrics_by_hand():
    """|p - q| on the 5 masked tokens: ln2, 0, ln2, 2 ln2, ln2 -> mean 5 ln2 / 5 = ln2, max 2 ln2.
    Cap 3 (ln 3 = 1.0986): only 2 ln2 = 1.386 lies outside [1/3, 3] -> 1 of 5 = 0.2."""
    p, q, m = _rows()
    got = mismatch_metrics(p, q, m, cap=3.0)
    assert got["mismatch/logprob_abs_diff_mean"] == pytest.approx(LN2, abs=1e-6)
    assert got["mismatch/logprob_abs_diff_max"] == pytest.approx(2 * LN2, abs=1e-6)
    assert got["mismatch/ratio_outside_frac"] == pytest.approx(0.2)
    assert mismatch_metrics(p, q, torch.zeros_like(m)) == {}


def test_mismatch_split_by_vision_distance_and_turn():
    """Distances row 0 [0, 9, 40], row 1 [-1, -1, pad]: bins [0, 8) -> ln2, [8, 32) -> 0, [32, 128) -> ln2,
    no vision -> (2 ln2 + ln2) / 2 = 1.5 ln2. Turns row 0 [0, 0, 1], row 1 [0, 1, pad]:
    turn 0 -> (ln2 + 0 + 2 ln2) / 3 = ln2, turn 1 -> (ln2 + ln2) / 2 = ln2."""
    p, q, m = _rows()
    dist = torch.tensor([[0, 9, 40], [-1, -1, -1]])
    turn = torch.tensor([[0, 0, 1], [0, 1, 0]])
    got = mismatch_metrics(p, q, m, cap=3.0, distance=dist, turn=turn)
    assert got["mismatch/near_vision_0_8"] == pytest.approx(LN2, abs=1e-6)
    assert got["mismatch/near_vision_8_32"] == pytest.approx(0.0, abs=1e-6)
    assert got["mismatch/near_vision_32_128"] == pytest.approx(LN2, abs=1e-6)
    assert "mismatch/near_vision_128_inf" not in got
    assert got["mismatch/no_vision"] == pytest.approx(1.5 * LN2, abs=1e-6)
    assert got["mismatch/turn_0"] == pytest.approx(LN2, abs=1e-6)
    assert got["mismatch/turn_1"] == pytest.approx(LN2, abs=1e-6)


def test_mismatch_after_media_keeps_the_turns_that_follow_an_observations_pixels():
    """after_media row 0 [0, 1, 1], row 1 [0, 1, 1 (pad)]: |p - q| on the kept tokens 0, ln2 (row 0), ln2
    (row 1; its padding left out): mean 2 ln2 / 3, max ln2. A trajectory whose observation was text only, and
    one whose observation showed an image, give the mask from their turns and token types."""
    from mmreason.rollout.episode_stats import after_media
    from mmreason.types import Trajectory, Turn

    p, q, m = _rows()
    got = mismatch_metrics(p, q, m, after_media=torch.tensor([[0, 1, 1], [0, 1, 1]]))
    assert got["mismatch/after_media_mean"] == pytest.approx(2 * LN2 / 3, abs=1e-6)
    assert got["mismatch/after_media_max"] == pytest.approx(LN2, abs=1e-6)
    assert "mismatch/after_media_mean" not in mismatch_metrics(p, q, m, after_media=torch.zeros(2, 3))

    def episode(obs_types):
        # prompt 0-1, assistant 2-3, observation 4-6, assistant 7-8
        types = torch.tensor([1, 0, 0, 0, *obs_types, 0, 0])
        turns = [Turn("assistant", "a", 2, 4), Turn("observation", "o", 4, 7), Turn("assistant", "b", 7, 9)]
        ids = torch.arange(9)
        return Trajectory("s", 0, ids, torch.ones(9), 2, "", turns=turns, mm_token_type_ids=types)

    assert after_media(episode([0, 1, 0])).tolist() == [False] * 7 + [True, True]
    assert not after_media(episode([0, 0, 0])).any()  # the prompt's image alone does not count


def test_vision_distance_counts_back_to_the_latest_vision_token():
    """types [0, 1, 1, 0, 0, 2, 0]: no vision before position 0 (-1); then 0, 0, 1, 2, 0, 1."""
    types = torch.tensor([0, 1, 1, 0, 0, 2, 0])
    assert vision_distance(types).tolist() == [-1, 0, 0, 1, 2, 0, 1]


def test_lower_bound_truncates_or_rejects():
    """floor 0.75, cap 3 (token ratios row 0 [2, 1, 0.5], row 1 [4, 2]): truncate -> [2, 1, 0.75] / [3, 2];
    mask (MIS) -> [2, 1, 0] / [0, 2]; sequence_mask (ratios 1 and 8) -> row 0 kept, row 1 rejected."""
    p, q, m = _rows()
    w = importance_weights(p, q, m, "token_truncate", 3.0, floor=0.75)
    torch.testing.assert_close(w, torch.tensor([[2.0, 1.0, 0.75], [3.0, 2.0, 0.0]]))
    w = importance_weights(p, q, m, "token_mask", 3.0, floor=0.75)
    torch.testing.assert_close(w, torch.tensor([[2.0, 1.0, 0.0], [0.0, 2.0, 0.0]]))
    w = importance_weights(p, q, m, "sequence_mask", 3.0, floor=0.75)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="vllm_importance_sampling_min"):
        importance_weights(p, q, m, "token_mask", 3.0, floor=4.0)


def test_off_policy_mask_drops_only_far_negative_rows():
    """mean behaviour - current gaps [0.5, 0.05, 0.9, 0.5 (empty row: 0)] with A [-1, -1, +1, -1], delta 0.1:
    row 0 dropped (A < 0, far), row 1 kept (near), row 2 kept (A > 0), row 3 kept (no tokens)."""
    from mmreason.rl.rollout_correction import off_policy_mask

    current = torch.zeros(4, 2)
    behaviour = torch.tensor([[0.4, 0.6], [0.05, 0.05], [0.9, 0.9], [0.5, 0.5]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [0, 0]])
    keep = off_policy_mask(torch.tensor([-1.0, -1.0, 1.0, -1.0]), current, behaviour, mask, 0.1)
    assert keep.tolist() == [0.0, 1.0, 1.0, 1.0]
    # token-level advantages: the row's sign is that of its mean
    keep = off_policy_mask(
        torch.tensor([[-1.0, 0.5], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]]), current, behaviour, mask, 0.1
    )
    assert keep.tolist() == [0.0, 1.0, 1.0, 1.0]
