"""Each alarm on hand-made metric rows: the rows that make it hold and the nearest rows that must not."""

from __future__ import annotations

import math

import pytest

from mmreason.health import alarms
from mmreason.health import config as hc
from mmreason.health.monitor import HealthMonitor


def steps(n: int, **series) -> list[dict]:
    """n training rows; each keyword is a function of the step (1..n) giving that metric."""
    return [
        {"step": s, "loss": 0.0, **{k.replace("__", "/"): f(s) for k, f in series.items()}} for s in range(1, n + 1)
    ]


def test_fitted_rise_known_answers():
    """[0.1, 0.2, 0.3]: slope 0.1 per step, rise 0.1 * 2 = 0.2, no residual (z = inf). [1, 3, 2]: slope
    (sum (x - 1)(y - 2)) / 2 = ((-1)(-1) + 0 + 1 * 0) / 2 = 0.5, rise 1.0; residuals -0.5, 1, -0.5 ->
    s2 = 1.5 / 1, se = sqrt(1.5 / 2) = 0.866, z = 0.5 / 0.866 = 0.577."""
    rise, z = alarms.fitted_rise([0.1, 0.2, 0.3])
    assert rise == pytest.approx(0.2) and z == math.inf
    rise, z = alarms.fitted_rise([1.0, 3.0, 2.0])
    assert rise == pytest.approx(1.0) and z == pytest.approx(0.5 / math.sqrt(0.75))


def _hacking_rows(eval_values: list[float], reward=lambda s: 0.1 + 0.002 * s + 0.001 * (s % 3)):
    rows = [{"step": 0, "eval/t/accuracy": eval_values[0]}]
    rows += steps(30, reward__mean=reward)
    for i, v in enumerate(eval_values[1:], 1):
        rows[10 * i]["eval/t/accuracy"] = v
        rows[10 * i]["eval/t/n_failed"] = 0.0
    return rows


def test_reward_hacking_holds_when_reward_rises_and_held_out_stays():
    c = hc.RewardHacking()
    reason = alarms.reward_hacking(_hacking_rows([0.0, 0.0, 0.0, 0.0]), c)
    assert reason and "reward/mean rose" in reason and "eval/t/accuracy 0.00 -> 0.00" in reason


@pytest.mark.parametrize(
    "evals, why",
    [
        ([0.7, 0.9, 1.0, 1.0], "held-out at its ceiling cannot rise"),
        ([0.1, 0.2, 0.3, 0.35], "held-out rises"),
    ],
)
def test_reward_hacking_quiet_when_held_out_rises_or_sits_at_ceiling(evals, why):
    assert alarms.reward_hacking(_hacking_rows(evals), hc.RewardHacking()) is None, why


def test_reward_hacking_quiet_on_flat_noise_short_runs_and_without_eval():
    c = hc.RewardHacking()
    flat = _hacking_rows([0.0] * 4, reward=lambda s: 0.1 + 0.01 * ((s * 7) % 5 - 2))  # noise, no trend
    assert alarms.reward_hacking(flat, c) is None
    assert alarms.reward_hacking(_hacking_rows([0.0] * 4)[:20], c) is None  # shorter than the window
    no_eval = [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in _hacking_rows([0.0] * 4)]
    assert alarms.reward_hacking(no_eval, c) is None


def test_reward_hacking_reads_one_component():
    rows = _hacking_rows([0.0] * 4, reward=lambda s: 0.5)
    for r in rows[1:]:
        r["rewards/fmt/mean"] = 0.01 * r["step"]
    assert "rewards/fmt/mean rose" in alarms.reward_hacking(rows, hc.RewardHacking())


def test_answer_collapse():
    c = hc.AnswerCollapse()
    collapsed = steps(
        3, answers__top_share=lambda s: 0.9, answers__gold_top_share=lambda s: 0.3, answers__golds=lambda s: 4
    )
    collapsed[-1]["answers/top"] = "rue"
    assert "'rue'" in alarms.answer_collapse(collapsed, c)
    one_gold = steps(
        3, answers__top_share=lambda s: 0.9, answers__gold_top_share=lambda s: 1.0, answers__golds=lambda s: 1
    )  # every prompt has the same gold: agreeing is right
    assert alarms.answer_collapse(one_gold, c) is None
    two_steps = collapsed[:2]
    assert alarms.answer_collapse(two_steps, c) is None


def test_entropy_collapse():
    c = hc.EntropyCollapse()
    assert "entropy" in alarms.entropy_collapse(steps(10, entropy=lambda s: 2.0 if s <= 5 else 0.1), c)
    # the main job's fall (1.94 -> 0.66) is a third of the start, not a collapse
    assert alarms.entropy_collapse(steps(10, entropy=lambda s: 1.94 if s <= 5 else 0.66), c) is None


def test_kl_blowup():
    c = hc.KLBlowup()
    assert "max_kl" in alarms.kl_blowup(steps(3, kl=lambda s: 2.0), c)
    assert "median" in alarms.kl_blowup(steps(10, kl=lambda s: 0.01 if s < 10 else 0.2), c)
    assert alarms.kl_blowup(steps(10, kl=lambda s: 0.01 * s), c) is None  # a steady climb, small
    assert alarms.kl_blowup(steps(10, entropy=lambda s: 1.0), c) is None  # beta 0: no kl logged


def test_no_signal_truncated_mismatch():
    assert alarms.no_signal(steps(10, frac_reward_zero_std=lambda s: 1.0), hc.NoSignal())
    assert alarms.no_signal(steps(10, frac_reward_zero_std=lambda s: 1.0 if s != 5 else 0.5), hc.NoSignal()) is None
    assert alarms.truncated(steps(5, completion__clipped_ratio=lambda s: 0.98), hc.Truncated())
    assert "episodes" in alarms.truncated(steps(5, episodes__cut_share=lambda s: 0.6), hc.Truncated())
    assert alarms.truncated(steps(5, completion__clipped_ratio=lambda s: 0.14), hc.Truncated()) is None
    assert alarms.logprob_mismatch(steps(3, mismatch__logprob_abs_diff_mean=lambda s: 0.5), hc.LogprobMismatch())
    assert (
        alarms.logprob_mismatch(steps(3, mismatch__logprob_abs_diff_mean=lambda s: 0.01), hc.LogprobMismatch()) is None
    )


def test_monitor_says_once_per_onset_and_obeys_switches():
    events, lines = [], []
    cfg = hc.HealthConfig()
    monitor = HealthMonitor(cfg, lambda kind, **f: events.append((kind, f)), lines.append)
    clipped = [1.0] * 6 + [0.0] + [1.0] * 5
    out = [monitor.check(s, {"loss": 0.0, "completion/clipped_ratio": v}) for s, v in enumerate(clipped, 1)]
    assert [o["alarm/truncated"] for o in out] == [0] * 4 + [1, 1, 0, 0, 0, 0, 0, 1]
    assert [f["step"] for _, f in events] == [5, 12] and all(k == "alarm" for k, _ in events)
    assert len(lines) == 2 and lines[0].startswith("ALARM step 5: truncated")
    assert set(out[0]) == {f"alarm/{n}" for n in alarms.ALARMS}
    cfg.truncated.enabled = False
    quiet = HealthMonitor(cfg, lambda *a, **k: None, lines.append)
    assert "alarm/truncated" not in quiet.check(1, {"completion/clipped_ratio": 1.0})
    cfg.enabled = False
    assert HealthMonitor(cfg, lambda *a, **k: None).check(1, {"loss": 0.0}) == {}


def test_answer_spread_of_a_step():
    """4 groups of 2; golds red, blue, green, red; 7 of 8 completions answer "Red" (one "blue"): the top
    answer is 'red' at 7/8 = 0.875, the top gold 'red' at 2/4 = 0.5 of the groups, 3 distinct golds."""
    from types import SimpleNamespace as NS

    from mmreason.train.metrics import answer_spread

    golds = ["red", "blue", "green", "red"]
    texts = ["Red", "Red", "Red", "blue", "Red", "Red", "Red", "Red"]
    trajectories = [NS(completion_text=t, group_id=i // 2) for i, t in enumerate(texts)]
    samples = [NS(answer=golds[i // 2]) for i in range(8)]
    run = NS(pack=NS(extract_answer=None))
    top, share, gold_share, n_golds = answer_spread(run, NS(trajectories=trajectories, samples=samples))
    assert (top, share, gold_share, n_golds) == ("red", 0.875, 0.5, 3.0)
