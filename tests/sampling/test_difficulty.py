"""Difficulty-aware augmentation (DeepVideo-R1): ΔR against the FIFO, hints that never hold the answer, seeded
frame noise that reaches the decoded frames, and state that survives a checkpoint."""

from __future__ import annotations

import pytest
import torch

from mmreason.media.video import add_frame_noise
from mmreason.rollout.prompts import load_sample_media
from mmreason.sampling.difficulty import Augmentation, DifficultyAugmenter, hint_from_trace
from mmreason.types import Sample, VideoRef

TRACE = "The square enters at one second. It moves right. It turns blue near the end. So the answer is blue."


def _sample(answer="blue", videos=(), choices=None) -> Sample:
    meta = {"choices": choices} if choices else {}
    return Sample(
        id="s1",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Which colour?"}]}],
        answer=answer,
        videos=list(videos),
        meta=meta,
    )


def _filled(mean: float, n: int = 20, **kwargs) -> DifficultyAugmenter:
    aug = DifficultyAugmenter(min_buffer=20, **kwargs)
    for k in range(n):
        aug.observe(f"other-{k}", [mean, mean], ["x", "y"])
    return aug


def test_delta_needs_a_full_enough_buffer_and_is_buffer_mean_minus_group_mean():
    aug = _filled(0.5, n=19)
    assert aug.delta([0.0, 0.0]) is None
    aug.observe("other", [1.0, 0.0], ["a", "b"])  # 20th group, mean 0.5
    assert aug.delta([0.0, 1.0, 1.0, 1.0]) == pytest.approx(0.5 - 0.75)


def test_the_fifo_keeps_the_last_window_groups():
    aug = DifficultyAugmenter(window=3, min_buffer=1)
    for r in (1.0, 1.0, 0.0, 0.0, 0.0):
        aug.observe("x", [r], ["t"])
    assert list(aug.buffer) == [0.0, 0.0, 0.0] and aug.delta([0.0]) == 0.0


def test_a_hard_group_gets_a_hint_cut_at_a_sentence_without_the_answer():
    aug = _filled(0.5)
    aug.observe("s1", [0.0, 1.0, 0.0], ["wrong", TRACE, "also wrong"])  # the best trace of s1
    plan = aug.plan(_sample(), [0.0] * 4, step=3)
    # buffer mean (20 x 0.5 + 1/3) / 21, group mean 0 -> d = ΔR = 0.49; 0.2 + 0.6 d = 0.50 of 20 words: 9, which end a sentence
    assert plan.kind == "hint" and plan.delta == pytest.approx((10 + 1 / 3) / 21)
    assert plan.strength == pytest.approx(plan.delta)
    assert plan.hint == "The square enters at one second. It moves right."
    hinted = DifficultyAugmenter.apply(_sample(), plan)
    assert hinted.prompt_text.endswith("\nHint: The square enters at one second. It moves right.")
    assert _sample().prompt_text == "Which colour?"  # the original is untouched


def test_hints_never_contain_the_answer_or_the_chosen_option():
    assert hint_from_trace(TRACE, 1.0, ["blue"]) == "The square enters at one second. It moves right. It turns"
    assert "blue" not in hint_from_trace(TRACE, 1.0, ["B", "blue"])
    assert hint_from_trace("Blue it is.", 1.0, ["blue"]) == ""
    aug = _filled(0.8)
    aug.observe("s1", [1.0], ["Blue. Definitely blue."])
    assert aug.plan(_sample("B", choices=["red", "blue"]), [0.0, 0.0], step=1) is None  # nothing left: no hint


def test_an_easy_video_group_gets_seeded_noise_growing_with_delta():
    video = [VideoRef("/v.mp4")]
    low, high = _filled(0.8), _filled(0.5)
    a = low.plan(_sample(videos=video), [1.0, 1.0], step=2)
    b = high.plan(_sample(videos=video), [1.0, 1.0], step=2)
    assert a.kind == b.kind == "noise"
    assert a.noise_std == pytest.approx(0.3 * 0.2) and b.noise_std == pytest.approx(0.3 * 0.5)
    assert a.seed == b.seed != high.plan(_sample(videos=video), [1.0, 1.0], step=3).seed
    assert high.plan(_sample(), [1.0, 1.0], step=2) is None  # no video to noise


def test_no_augmentation_for_groups_with_signal_small_delta_or_no_trace():
    aug = _filled(0.5)
    assert aug.plan(_sample(videos=[VideoRef("/v")]), [1.0, 0.0, 1.0], step=1) is None  # rewards vary
    assert aug.plan(_sample(videos=[VideoRef("/v")]), [0.55, 0.55], step=1) is None  # |ΔR| <= 0.1 r_max
    assert aug.plan(_sample(), [0.0, 0.0], step=1) is None  # hard, but no earlier trace of s1


def test_state_round_trip_plans_the_same():
    aug = _filled(0.5)
    aug.observe("s1", [1.0], [TRACE])
    again = DifficultyAugmenter(min_buffer=20)
    again.load_state_dict(aug.state_dict())
    assert again.plan(_sample(), [0.0], step=5) == aug.plan(_sample(), [0.0], step=5)
    assert list(again.buffer) == list(aug.buffer)


def test_summary_logs_fractions_and_mean_strength():
    plans = [Augmentation("hint", 0.4, 0.4, hint="h"), None, Augmentation("noise", 0.2, -0.2, noise_std=0.06), None]
    assert DifficultyAugmenter.summary(plans) == {
        "augment/frac_hint": 0.25,
        "augment/frac_noise": 0.25,
        "augment/strength_mean": pytest.approx(0.3),
    }


def test_frame_noise_reaches_the_decoded_frames(tmp_path):
    from mmreason.tasks.videoqa import synth

    s = synth.Scenario(3, 4, 0.0, 1.5, 1.0, "red", "blue", "right", (1.5,), 500)
    path = str(synth.write_video(tmp_path / "v.mp4", s, 64))
    clean = load_sample_media(_sample(videos=[VideoRef(path)]), 3136, 3136, 2.0, 8)[1][0]
    noisy_ref = VideoRef(path, noise_std=0.1, noise_seed=7)
    noisy = load_sample_media(_sample(videos=[noisy_ref]), 3136, 3136, 2.0, 8)[1][0]
    again = load_sample_media(_sample(videos=[noisy_ref]), 3136, 3136, 2.0, 8)[1][0]
    assert torch.equal(noisy, again) and noisy.shape == clean.shape and noisy.dtype == torch.uint8
    diff = (noisy.float() - clean.float()) / 255
    assert 0.07 < float(diff.std()) < 0.11  # sigma 0.1, a little less where clamped at 0 / 1
    assert torch.equal(add_frame_noise(clean, 0.0, 1), clean)
