"""The digest readings ETR, DHPO, ERPO, GEPO and ConSPO (docs/algorithms.md#readings-of-abstracts): the behaviour each
abstract states, on numbers worked by hand. Rows of one token unless said; old log-prob 0, so logp = log r.

ETR, epsilon 0.2, micro_scale 0.5, macro off: eps_i = 0.2 (1 + 0.5 tanh|A_i|)
    A = 0.5 -> eps 0.246212;  A = 2 -> eps 0.296403.  Ratio 1.27 on both rows: row 1 is clipped (1.27 > 1.246212,
    loss -0.5 * 1.246212, gradient 0), row 2 is not (1.27 < 1.296403, loss -2 * 1.27, gradient -2 * 1.27 / 2).
    Mean loss (-0.623106 - 2.54) / 2 = -1.581553.  With a fixed clip 0.2 both rows would be clipped.
ETR macro, micro off, rewards [1, 0 | 1, 1]: group 0 has variance 1/4 = span^2 / 4 -> v = 1 -> eps 0.2 (1 + 0.5) = 0.3;
    group 1 is constant -> v = 0 -> eps 0.2.  macro_target weight: eps stays 0.2, the weights are [1.5, 1.5, 1, 1].
DHPO, average mixing, one row, log r = [ln 1.5, 0], A = 1: token branch [min(1.5, 1.2), 1] = [1.2, 1] (token 1 clipped);
    sequence branch s = 1.5^(1/2) = 1.224745, clipped to 1.0004.  Losses -(0.6 + 0.5002), -(0.5 + 0.5002);
    mean -1.0502; gradient [0, -0.5 * 1 / 2] = [0, -0.25] (the clipped sequence branch gives none).
DHPO entropy mixing: entropies [2, 0] -> z = [1, -1] -> token weights sigmoid(+-1) = [0.731059, 0.268941].
ERPO, 4 tokens, 2 buckets, entropies [3, 1, 1, 1]: mean 1.5, std sqrt(0.75) -> z = [1.732051, -0.577350 x 3],
    gate 1 + sigmoid(z) = [1.849675, 1.359543 x 3]; bucket 0 = tokens 0-1 (mean 1.604609), bucket 1 = tokens 2-3
    -> weights [1.152726, 0.847274, 1, 1].  On policy with A = -1 the gradient is -A_it / 4 = [0.288182, 0.211818, 0.25, 0.25].
GEPO, rows A = [1, -1 | 1, -1], group entropies [0.1 | 2.0], no history: quantiles of [0.1, 2.0] at 0.25 / 0.75 are
    0.575 / 1.525: group 0's positive and group 1's negative are halved, A' = [0.5, -1, 1, -0.5]; on policy the
    gradient is -A'/4 = [-0.125, 0.25, -0.25, 0.125].
ConSPO, tau 1, no margin, one group, scores [-1, -0.2 | -0.5, -3] (positives | negatives):
    p_i = e^{s_i} / (e^{s_i} + e^-0.5 + e^-3) = [0.359188, 0.555053]; loss -(ln p_1 + ln p_2)/2 = 0.806300
    d loss / d s = [-(1 - p_1)/2, -(1 - p_2)/2, ...] = [-0.320406, -0.222473]: the poorly separated positive pulls harder;
    negatives: 0.5 e^{s_j} (1/(e^-1 + N) + 1/(e^-0.2 + N)) = [0.501697, 0.041182]: the high-scoring negative is pushed harder.
"""

import math

import pytest
import torch

from mmreason.rl import policy_loss
from mmreason.rl.losses.conspo import margin_at
from mmreason.rl.losses.dhpo import entropy_weight
from mmreason.rl.losses.erpo import erpo_weights
from mmreason.rl.losses.etr import elastic_epsilons


def rows(log_r, adv, name, **options):
    lp = torch.tensor(log_r, dtype=torch.float32).requires_grad_(True)
    mask = options.pop("mask", torch.ones_like(lp))
    out = policy_loss(name, lp, torch.zeros_like(lp), torch.tensor(adv), mask, **options)
    (grad,) = torch.autograd.grad(out.loss, lp)
    return out, grad


def test_etr_widens_the_clip_for_a_larger_advantage():
    log_r = [[math.log(1.27)], [math.log(1.27)]]
    out, grad = rows(log_r, [0.5, 2.0], "etr", macro_scale=0.0)
    assert out.loss.item() == pytest.approx(-1.581553, abs=1e-5)
    torch.testing.assert_close(grad[:, 0], torch.tensor([0.0, -1.27]), atol=1e-5, rtol=0)
    fixed, fixed_grad = rows(log_r, [0.5, 2.0], "clipped")
    assert torch.count_nonzero(fixed_grad) == 0  # the static clip cuts both


def test_etr_macro_level_favours_groups_near_pass_rate_one_half():
    adv, rewards, groups = (
        torch.tensor([1.0, -1.0, 0.0, 0.0]),
        torch.tensor([1.0, 0.0, 1.0, 1.0]),
        torch.tensor([0, 0, 1, 1]),
    )
    common = dict(epsilon=0.2, epsilon_high=0.2, micro_scale=0.0, macro_scale=0.5, max_epsilon=0.5)
    low, high, weight = elastic_epsilons(adv, rewards, groups, macro_target="epsilon", **common)
    torch.testing.assert_close(low, torch.tensor([0.3, 0.3, 0.2, 0.2]))
    torch.testing.assert_close(weight, torch.ones(4))
    low, _, weight = elastic_epsilons(adv, rewards, groups, macro_target="weight", **common)
    torch.testing.assert_close(low, torch.full((4,), 0.2))
    torch.testing.assert_close(weight, torch.tensor([1.5, 1.5, 1.0, 1.0]))


def test_etr_at_zero_advantage_and_without_scales_is_the_clipped_surrogate():
    torch.manual_seed(0)
    lp, adv = torch.randn(3, 4) * 0.3, torch.tensor([1.0, 0.0, -0.7])
    plain = policy_loss("clipped", lp, torch.zeros(3, 4), adv, torch.ones(3, 4)).loss
    etr = policy_loss("etr", lp, torch.zeros(3, 4), adv, torch.ones(3, 4), micro_scale=0.0, macro_scale=0.0).loss
    torch.testing.assert_close(etr, plain)


def test_dhpo_clips_each_branch_before_mixing():
    out, grad = rows([[math.log(1.5), 0.0]], [1.0], "dhpo")
    assert out.loss.item() == pytest.approx(-1.0502, abs=1e-5)
    torch.testing.assert_close(grad[0], torch.tensor([0.0, -0.25]), atol=1e-6, rtol=0)


def test_dhpo_on_policy_equals_grpo_and_entropy_weights_lean_on_the_token_ratio():
    torch.manual_seed(1)
    lp, adv, mask = torch.randn(2, 3), torch.tensor([1.0, -0.5]), torch.ones(2, 3)
    a = lp.clone().requires_grad_(True)
    b = lp.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(policy_loss("dhpo", a, lp.clone(), adv, mask).loss, a)
    (gb,) = torch.autograd.grad(policy_loss("clipped", b, lp.clone(), adv, mask).loss, b)
    torch.testing.assert_close(ga, gb)
    w = entropy_weight(torch.tensor([[2.0, 0.0]]), torch.ones(1, 2), 1.0)
    torch.testing.assert_close(w, torch.tensor([[0.731059, 0.268941]]), atol=1e-6, rtol=0)


def test_erpo_amplifies_the_high_entropy_token_within_its_bucket_and_keeps_the_sign():
    ent, mask = torch.tensor([[3.0, 1.0, 1.0, 1.0]]), torch.ones(1, 4)
    w = erpo_weights(ent, mask, gate_strength=1.0, buckets=2)
    torch.testing.assert_close(w, torch.tensor([[1.152726, 0.847274, 1.0, 1.0]]), atol=1e-5, rtol=0)
    _, grad = rows([[0.0] * 4], [-1.0], "erpo", entropy=ent, buckets=2)
    torch.testing.assert_close(grad[0], torch.tensor([0.288182, 0.211818, 0.25, 0.25]), atol=1e-5, rtol=0)
    assert (grad > 0).all()  # a negative outcome pushes every token down: no token flips its sign


def test_gepo_shrinks_positives_of_a_calm_group_and_negatives_of_an_uncertain_one():
    ent, groups = torch.tensor([[0.1], [0.1], [2.0], [2.0]]), torch.tensor([0, 0, 1, 1])
    _, grad = rows([[0.0]] * 4, [1.0, -1.0, 1.0, -1.0], "gepo", entropy=ent, group_ids=groups)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.125, 0.25, -0.25, 0.125]))
    # a history of higher group entropies moves both thresholds up: both groups now count as calm
    history = torch.full((8,), 5.0)
    _, grad = rows([[0.0]] * 4, [1.0, -1.0, 1.0, -1.0], "gepo", entropy=ent, group_ids=groups, entropy_history=history)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.125, 0.25, -0.125, 0.25]))
    _, grad = rows([[0.0]] * 4, [1.0, -1.0, 1.0, -1.0], "gepo", group_ids=groups)  # no entropy: plain GRPO
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.25, 0.25, -0.25, 0.25]))


def test_conspo_weights_poorly_separated_positives_and_high_scoring_negatives():
    scores = torch.tensor([[-1.0], [-0.2], [-0.5], [-3.0]])
    out, grad = rows(
        scores.tolist(),
        [1.0, 1.0, -1.0, -1.0],
        "conspo",
        tau=1.0,
        margin_schedule="constant",
        margin=0.0,
        group_ids=torch.zeros(4, dtype=torch.long),
    )
    assert out.loss.item() == pytest.approx(0.806300, abs=1e-5)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.320406, -0.222473, 0.501697, 0.041182]), atol=1e-5, rtol=0)


def test_conspo_margin_schedule_and_groups_without_both_signs():
    assert margin_at(100, 0.1, "linear", 200) == pytest.approx(0.05)
    assert margin_at(500, 0.1, "linear", 200) == pytest.approx(0.1)
    assert margin_at(0, 0.1, "constant", 200) == pytest.approx(0.1)
    out, grad = rows([[-1.0], [-2.0]], [1.0, 0.0], "conspo", group_ids=torch.tensor([0, 0]))  # no negative
    assert out.loss.item() == 0.0 and torch.count_nonzero(grad) == 0
    pooled, _ = rows(
        [[-1.0], [-0.2], [-0.5], [-3.0]],
        [1.0, 1.0, -1.0, -1.0],
        "conspo",
        tau=1.0,
        margin_schedule="constant",
        margin=0.0,
        variant="pooled",
        group_ids=torch.zeros(4, dtype=torch.long),
    )
    p = (math.exp(-1) + math.exp(-0.2)) / (math.exp(-1) + math.exp(-0.2) + math.exp(-0.5) + math.exp(-3))
    assert pooled.loss.item() == pytest.approx(-math.log(p), abs=1e-5)


@pytest.mark.parametrize("name", ["etr", "dhpo", "erpo", "gepo", "conspo"])
def test_empty_mask_gives_zero_loss(name):
    lp = torch.randn(2, 3, requires_grad=True)
    out = policy_loss(
        name, lp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.zeros(2, 3), group_ids=torch.tensor([0, 0])
    )
    (g,) = torch.autograd.grad(out.loss, lp)
    assert out.loss.item() == 0.0 and torch.count_nonzero(g) == 0


def test_dagrpo_masks_near_duplicates_of_opposite_sign():
    """Group 0: rows 0 (A +1) and 1 (A -1) share 3 of 5 distinct bigrams (Jaccard 0.6); row 2 (A -1) shares none.
    Row 3 repeats row 0's tokens with A -1 but in group 1, so it pairs with nothing. On policy each unmasked row's
    gradient is -A / (5 tokens x 4 rows) = -+0.05 per token."""
    ids = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 4, 6], [7, 8, 9, 10, 11], [1, 2, 3, 4, 5]])
    groups, adv = torch.tensor([0, 0, 0, 1]), [1.0, -1.0, -1.0, -1.0]
    _, grad = rows([[0.0] * 5] * 4, adv, "dagrpo", token_ids=ids, group_ids=groups, similarity_threshold=0.5)
    torch.testing.assert_close(grad[:, 0], torch.tensor([0.0, 0.0, 0.05, 0.05]))
    _, grad = rows(
        [[0.0] * 5] * 4, adv, "dagrpo", token_ids=ids, group_ids=groups, similarity_threshold=0.5, mask_rows="negative"
    )
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.05, 0.0, 0.05, 0.05]))
    _, grad = rows([[0.0] * 5] * 4, adv, "dagrpo", token_ids=ids, group_ids=groups, similarity_threshold=0.7)
    torch.testing.assert_close(grad[:, 0], torch.tensor([-0.05, 0.05, 0.05, 0.05]))  # 0.6 < 0.7: nothing masked


def test_r3_rank_gives_an_all_fail_group_a_signal_from_its_entropy_ranking():
    """Group 0 all fails (A = 0) with mean entropies [0.5, 0.2, 0.9]: the steadiest ranks highest, bonuses
    [0, +0.1, -0.1]; on policy the gradient is -A'/4 = [0, -0.025, 0.025]. Row 3 (group 1) succeeded: unchanged."""
    ent = torch.tensor([[0.5], [0.2], [0.9], [3.0]])
    common = dict(entropy=ent, rewards=torch.tensor([0.0, 0.0, 0.0, 1.0]), group_ids=torch.tensor([0, 0, 0, 1]))
    _, grad = rows([[0.0]] * 4, [0.0, 0.0, 0.0, 1.0], "r3_rank", **common)
    torch.testing.assert_close(grad[:, 0], torch.tensor([0.0, -0.025, 0.025, -0.25]))
    _, grad = rows([[0.0]] * 4, [0.0, 0.0, 0.0, 1.0], "r3_rank", prefer="high", **common)
    torch.testing.assert_close(grad[:, 0], torch.tensor([0.0, 0.025, -0.025, -0.25]))


def test_vps_segments_progress_and_the_refined_advantage():
    """Cut: line breaks after tokens 1 and 4 of 6 -> ends [2, 5, 6]; thinned to 2 segments -> [5, 6]; fixed
    every 3 of 8 -> [3, 6, 8]. Answer log-probs q = [-5, -4, -4.5, -1] at the boundaries -> per-token progress
    [1, 1, -0.5, -0.5, -0.5, 3.5]. Loss: A = 1, progress [0.5, -0.5], weight 0.5 -> A_t = 1 +- 0.5 tanh 0.5 =
    [1.231059, 0.768941]; on policy the gradient is -A_t / 2; a failed row (A = -1) with a progressing first
    segment (tanh 2) gets -1 + 0.5 * 0.964028 = -0.517986 there."""
    from mmreason.rl.losses.vps import progress_per_token, segment_bounds

    flags = [False, True, False, False, True, False]
    assert segment_bounds(flags, segmenter="newline", segment_tokens=16, max_segments=8) == [2, 5, 6]
    assert segment_bounds(flags, segmenter="newline", segment_tokens=16, max_segments=2) == [5, 6]
    assert segment_bounds([False] * 8, segmenter="fixed", segment_tokens=3, max_segments=8) == [3, 6, 8]
    assert segment_bounds([], segmenter="newline", segment_tokens=3, max_segments=8) == []
    torch.testing.assert_close(
        progress_per_token([-5.0, -4.0, -4.5, -1.0], [2, 5, 6], 6), torch.tensor([1.0, 1.0, -0.5, -0.5, -0.5, 3.5])
    )
    _, grad = rows([[0.0, 0.0]], [1.0], "vps", segment_progress=torch.tensor([[0.5, -0.5]]))
    torch.testing.assert_close(grad[0], torch.tensor([-0.615529, -0.384471]), atol=1e-5, rtol=0)
    _, grad = rows([[0.0, 0.0]], [-1.0], "vps", segment_progress=torch.tensor([[2.0, 0.0]]))
    torch.testing.assert_close(grad[0], torch.tensor([0.258993, 0.5]), atol=1e-5, rtol=0)
    _, grad = rows([[0.0, 0.0]], [1.0], "vps")  # no probes: GRPO
    torch.testing.assert_close(grad[0], torch.tensor([-0.5, -0.5]))


def test_vps_probes_append_the_answer_at_every_boundary():
    from mmreason.train.vps import probes_of
    from mmreason.types import Trajectory

    t = Trajectory("s", 0, torch.tensor([1, 2, 3, 7, 8, 9]), torch.tensor([0, 0, 0, 1, 1, 1]), 3, "x")
    probes = probes_of(t, torch.tensor([5]), [2, 3])
    assert [p.token_ids.tolist() for p in probes] == [[1, 2, 3, 5], [1, 2, 3, 7, 8, 5], [1, 2, 3, 7, 8, 9, 5]]
    assert all(p.action_mask.tolist()[-1] == 1 and sum(p.action_mask.tolist()) == 1 for p in probes)
