"""The reward plug-in API: registry, references, calling conventions, isolation, the RewardBatch."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import textwrap
import time

import pytest
import torch
from reward_factory import sample, traj

from mmreason.rewarding import (
    REWARDS,
    RewardConfigError,
    RewardErrorLimitExceeded,
    RewardRunner,
    RewardSpec,
    list_rewards,
    resolve_reward,
    reward,
)
from mmreason.rewarding import registry as registry_module

REQUIRED = [
    "think_answer_format",
    "docseeker_format",
    "mcq",
    "numeric",
    "relaxed_accuracy",
    "math",
    "anls",
    "vqa_exact",
    "page_fbeta",
    "temporal_iou",
    "bbox_iou",
    "tool_call_valid",
    "length_trapezoid",
    "overlong_penalty",
    "route_step",
    "vlm_judge",
]


def batch_of(*texts, **meta):
    samples = [
        sample(meta.get("answer"), id=f"s{i}", **{k: v for k, v in meta.items() if k != "answer"})
        for i in range(len(texts))
    ]
    return samples, [traj(t, sample_id=f"s{i}") for i, t in enumerate(texts)]


# ---- registry and references ---------------------------------------------------------------------


def test_every_required_reward_is_registered_with_a_doc_line():
    rows = dict(list_rewards())
    for name in REQUIRED:
        assert name in rows, name
        assert len(rows[name]) > 10, name


def test_duplicate_registration_names_both_functions():
    @reward("test_dup_reward")
    def first(samples, trajectories):
        """First."""
        return [1.0] * len(samples)

    try:
        with pytest.raises(ValueError, match="first.*second"):

            @reward("test_dup_reward")
            def second(samples, trajectories):
                return [0.0] * len(samples)
    finally:
        REWARDS._items.pop("test_dup_reward", None)


def test_unknown_name_suggests_the_closest():
    with pytest.raises(KeyError, match="did you mean 'anls'"):
        resolve_reward("anl")


def test_dotted_and_file_references(tmp_path, monkeypatch):
    assert resolve_reward("mmreason.rewards.accuracy:numeric") is REWARDS.get("numeric")
    folder = tmp_path / "cfg"
    (folder / "rw").mkdir(parents=True)
    (folder / "rw" / "my_reward.py").write_text(
        textwrap.dedent('''
        def contains_answer(prompts, completions, answer, **kwargs):
            """1 if the completion contains the answer."""
            return [float(str(a) in c) for c, a in zip(completions, answer)]
    ''')
    )
    fn = resolve_reward("rw/my_reward.py:contains_answer", base_dir=folder)
    assert fn(prompts=[""], completions=["it is 7"], answer=[7]) == [1.0]
    assert resolve_reward("rw/my_reward.py:contains_answer", base_dir=folder) is fn  # loaded once
    monkeypatch.chdir(folder)
    assert resolve_reward("rw/my_reward.py:contains_answer") is fn  # relative to the working directory
    with pytest.raises(FileNotFoundError, match="nothere.py"):
        resolve_reward("rw/nothere.py:f", base_dir=folder)
    with pytest.raises(AttributeError, match="contains_answer"):
        resolve_reward("rw/my_reward.py:missing", base_dir=folder)


def test_file_reward_runs_through_the_runner(tmp_path):
    (tmp_path / "caption.py").write_text(
        textwrap.dedent("""
        from mmreason.rewarding import per_sample

        @per_sample
        def mentions_label(sample, trajectory, *, bonus=0.0):
            return float(sample.meta["label"] in trajectory.completion_text) + bonus
    """)
    )
    runner = RewardRunner(
        [RewardSpec("caption", ref="caption.py:mentions_label", kwargs={"bonus": 0.5})], base_dir=tmp_path
    )
    samples, trajectories = batch_of("a red cat", "a dog", label="cat")
    assert runner(samples, trajectories).values[:, 0].tolist() == [1.5, 0.5]


def test_entry_point_plugins_are_loaded(tmp_path, monkeypatch):
    (tmp_path / "thirdparty_rewards.py").write_text(
        "def shouting(samples, trajectories):\n"
        "    '''1 if the completion is upper case.'''\n"
        "    return [float(t.completion_text.isupper()) for t in trajectories]\n"
    )
    info = tmp_path / "thirdparty_rewards-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-rewards\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[mmreason.rewards]\nshouting = thirdparty_rewards:shouting\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        registry_module._load_rewards()
        assert "shouting" in dict(list_rewards())
        runner = RewardRunner([RewardSpec("shouting")])
        assert runner(*batch_of("HEY", "hey")).values[:, 0].tolist() == [1.0, 0.0]
    finally:
        REWARDS._items.pop("shouting", None)
        sys.modules.pop("thirdparty_rewards", None)


# ---- calling conventions -------------------------------------------------------------------------


def test_trl_style_functions_work_unchanged():
    seen = {}

    def trl_reward(completions, solution, **kwargs):
        seen.update(kwargs, completions=completions, solution=solution)
        return [float(c.strip() == s) for c, s in zip(completions, solution)]

    def strict_trl(prompts, completions, answer):  # no **kwargs: only the names it takes
        return [float(a in c) for c, a in zip(completions, answer)]

    runner = RewardRunner([RewardSpec("trl", ref=trl_reward), RewardSpec("strict", ref=strict_trl)])
    samples, trajectories = batch_of("42", "41", answer="42", solution="42")
    batch = runner(samples, trajectories)
    assert batch.values.tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert seen["prompts"] == ["What is shown?"] * 2 and seen["answer"] == ["42", "42"]
    assert "completion_ids" in seen and "images" in seen


def test_trl_conversational_format_passes_messages():
    def conversational(prompts, completions, **kwargs):
        return [float(c[0]["role"] == "assistant" and p[0]["role"] == "user") for p, c in zip(prompts, completions)]

    runner = RewardRunner([RewardSpec("conv", ref=conversational, trl_format="conversational")])
    assert runner(*batch_of("x")).values.tolist() == [[1.0]]


def test_missing_column_and_bad_kwargs_fail_loudly():
    def needs_solution(completions, solution):
        return [1.0] * len(completions)

    runner = RewardRunner([RewardSpec("needs", ref=needs_solution)])
    with pytest.raises(RewardConfigError, match="solution"):
        runner(*batch_of("x"))
    with pytest.raises(RewardConfigError, match="nonsense"):
        RewardRunner([RewardSpec("numeric", kwargs={"nonsense": 1})])
    with pytest.raises(RewardConfigError, match="twice|two rewards"):
        RewardRunner([RewardSpec("numeric"), RewardSpec("numeric")])


def test_outputs_dicts_none_and_weights():
    def parts(samples, trajectories):
        return {"a": [1.0, None], "b": torch.tensor([0.5, 0.25])}

    runner = RewardRunner(
        [
            RewardSpec("fmt", ref=lambda s, t: [1, 0], weight=0.2),
            RewardSpec("parts", ref=parts, weight={"a": 2.0}),
            RewardSpec("mcq", weight=1.0),
        ]
    )
    samples, trajectories = batch_of("(B)", "no idea", answer="B")
    batch = runner(samples, trajectories)
    assert batch.names == ["fmt", "parts/a", "parts/b", "mcq/accuracy", "mcq/unparsed"]
    assert batch.weights.tolist() == pytest.approx([0.2, 2.0, 0.0, 1.0, 0.0])  # unparsed is a diagnostic
    assert batch.values.dtype == torch.float32 and batch.values.shape == (2, 5)
    assert math.isnan(batch.values[1, 1].item())  # None -> NaN
    assert batch.total().tolist() == pytest.approx([0.2 + 2.0 + 1.0, 0.0])
    assert batch.means()["rewards/parts/a"] == 1.0  # NaN left out of the mean
    with pytest.raises(RewardConfigError, match="zzz"):
        RewardRunner([RewardSpec("mcq", weight={"zzz": 1.0})])


def test_renormalised_total():
    runner = RewardRunner(
        [
            RewardSpec("x", ref=lambda s, t: [1.0, 1.0], weight=0.1),
            RewardSpec("y", ref=lambda s, t: [None, 1.0], weight=0.3),
            RewardSpec("z", ref=lambda s, t: [1.0, 1.0], weight=0.6),
        ]
    )
    batch = runner(*batch_of("a", "b"))
    assert batch.total("zero").tolist() == pytest.approx([0.7, 1.0])
    assert batch.total("renormalize").tolist() == pytest.approx([1.0, 1.0])


def test_keys_learned_from_first_output_stay():
    calls = {"n": 0}

    def growing(samples, trajectories):
        calls["n"] += 1
        return {"a": [1.0]} if calls["n"] == 1 else {"a": [1.0], "b": [2.0]}

    runner = RewardRunner([RewardSpec("g", ref=growing)])
    assert runner(*batch_of("x")).names == ["g/a"]
    second = runner(*batch_of("x"))
    assert second.names == ["g/a", "g/b"] and second.values.tolist() == [[1.0, 2.0]]


def test_samples_matched_to_trajectories_by_id():
    samples = [sample("1", id="p"), sample("2", id="q")]
    trajectories = [traj("1", sample_id="q"), traj("2", sample_id="q"), traj("1", sample_id="p")]
    runner = RewardRunner([RewardSpec("numeric")])
    assert runner(samples, trajectories).values[:, 0].tolist() == [0.0, 1.0, 1.0]


# ---- isolation -----------------------------------------------------------------------------------


def flaky(samples, trajectories):
    out = []
    for t in trajectories:
        if "boom" in t.completion_text:
            raise ZeroDivisionError("division by zero in flaky")
        out.append(1.0)
    return out


def test_an_exception_costs_only_its_sample(caplog):
    runner = RewardRunner([RewardSpec("flaky", ref=flaky)], on_error="none")
    samples, trajectories = batch_of("ok", "boom", "ok")
    with caplog.at_level(logging.WARNING, logger="mmreason.rewards"):
        batch = runner(samples, trajectories)
    values = batch.values[:, 0].tolist()
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2] == 1.0
    (record,) = batch.errors
    assert (record.reward, record.sample_id, record.kind) == ("flaky", "s1", "exception")
    assert "ZeroDivisionError" in record.message and "flaky" in record.message
    assert "s1" in caplog.text and "ZeroDivisionError" in caplog.text
    assert runner.error_counts == {"flaky": 1}
    zero = RewardRunner([RewardSpec("flaky", ref=flaky)], on_error="zero")
    assert zero(samples, trajectories).values[:, 0].tolist() == [1.0, 0.0, 1.0]


def test_malformed_output_is_an_error():
    runner = RewardRunner([RewardSpec("bad", ref=lambda s, t: ["high"] * len(t))])
    batch = runner(*batch_of("x", "y"))
    assert [e.kind for e in batch.errors] == ["output", "output"]
    assert torch.isnan(batch.values).all()


def test_sync_timeout_isolates_the_slow_sample():
    def slow(samples, trajectories):
        if any("slow" in t.completion_text for t in trajectories):
            time.sleep(5)
        return [1.0] * len(trajectories)

    runner = RewardRunner([RewardSpec("slow", ref=slow)], timeout_s=0.3)
    start = time.monotonic()
    batch = runner(*batch_of("fast", "slow", "fast"))
    assert time.monotonic() - start < 2.0  # batch call + 3 single calls, each bounded by 0.3 s
    values = batch.values[:, 0].tolist()
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2] == 1.0
    assert [(e.sample_id, e.kind) for e in batch.errors] == [("s1", "timeout")]


def test_async_rewards_and_their_timeout():
    async def judged(samples, trajectories, delay=0.0):
        if any("slow" in t.completion_text for t in trajectories):
            await asyncio.sleep(5)
        await asyncio.sleep(delay)
        return [0.5] * len(trajectories)

    runner = RewardRunner([RewardSpec("judge", ref=judged, kwargs={"delay": 0.01})], timeout_s=0.3)
    assert runner(*batch_of("a", "b")).values[:, 0].tolist() == [0.5, 0.5]
    start = time.monotonic()
    batch = runner(*batch_of("a", "slow"))
    assert time.monotonic() - start < 1.5  # per-sample retries run concurrently
    assert batch.values[0, 0].item() == 0.5 and math.isnan(batch.values[1, 0].item())
    assert batch.errors[0].kind == "timeout"


def test_error_limit_stops_the_run_with_a_clear_message():
    runner = RewardRunner([RewardSpec("flaky", ref=flaky)], max_reward_errors=2)
    runner(*batch_of("boom", "ok"))
    runner(*batch_of("boom", "ok"))
    with pytest.raises(RewardErrorLimitExceeded, match=r"3 reward calls failed.*max_reward_errors=2.*flaky: 3"):
        runner(*batch_of("boom", "ok"))


def test_empty_batch_and_bad_float():
    class Weird:
        def __float__(self):
            raise ArithmeticError("no float for you")

    runner = RewardRunner([RewardSpec("numeric"), RewardSpec("weird", ref=lambda s, t: [Weird() for _ in t])])
    empty = runner([], [])  # a registered reward's column is known up front; a bare function's once it returns
    assert empty.values.shape == (0, 1) and empty.names == ["numeric"]
    batch = runner(*batch_of("x", "y"))
    assert [e.kind for e in batch.errors] == ["exception", "exception"]
    assert "no float for you" in batch.errors[0].message


def test_registered_reward_without_declared_keys_switches_to_its_sub_scores():
    @reward("test_undeclared_dict")
    def undeclared(samples, trajectories):
        """A dict reward that does not declare its keys."""
        return {"p": [1.0] * len(samples), "q": [0.0] * len(samples)}

    try:
        runner = RewardRunner([RewardSpec("numeric"), RewardSpec("test_undeclared_dict"), RewardSpec("anls")])
        assert runner.names == ["numeric", "test_undeclared_dict", "anls"]  # assumed plain lists
        batch = runner(*batch_of("1", answer="1"))
        assert batch.names == ["numeric", "test_undeclared_dict/p", "test_undeclared_dict/q", "anls"]
        assert batch.values.tolist() == [[1.0, 1.0, 0.0, 1.0]]
    finally:
        REWARDS._items.pop("test_undeclared_dict", None)


def test_weight_dict_on_a_plain_reward_is_rejected():
    runner = RewardRunner([RewardSpec("numeric", weight={"accuracy": 1.0})])
    with pytest.raises(RewardConfigError, match="must be a number"):
        runner(*batch_of("1", answer="1"))


SPINNING = '''
def spin(samples, trajectories):
    """Spins in pure Python (holding the interpreter lock) on samples that say "spin"."""
    if any("spin" in t.completion_text for t in trajectories):
        x = 0
        while True:
            x += 1
    return [1.0] * len(trajectories)
'''


def test_a_reward_that_spins_is_killed_at_its_timeout_and_the_run_goes_on(tmp_path):
    import multiprocessing

    (tmp_path / "spinning.py").write_text(SPINNING)
    runner = RewardRunner([RewardSpec("spin", ref=f"{tmp_path}/spinning.py:spin")], timeout_s=1.0)
    start = time.monotonic()
    batch = runner(*batch_of("spin", "fine", "spin"))
    elapsed = time.monotonic() - start
    assert elapsed < 1.0 + 2 * 1.0 + 1.0, elapsed  # the batch call, then at most two timeouts of retries
    assert batch.values[1, 0].item() == 1.0  # the sample that does not spin still scores
    assert [(e.sample_id, e.kind) for e in batch.errors] == [("s0", "timeout"), ("s2", "timeout")]
    time.sleep(0.2)
    assert not [p for p in multiprocessing.active_children() if p.name == "mmreason-reward"]  # killed, not left
    start = time.monotonic()
    assert runner(*batch_of("fine", "fine")).values[:, 0].tolist() == [1.0, 1.0]  # and the run goes on
    assert time.monotonic() - start < 1.0


def test_an_exception_in_a_worker_process_is_reported_with_its_traceback(tmp_path):
    (tmp_path / "broken.py").write_text("def broken(samples, trajectories):\n    raise KeyError('no such column')\n")
    runner = RewardRunner([RewardSpec("broken", ref=f"{tmp_path}/broken.py:broken")], timeout_s=5.0)
    batch = runner(*batch_of("a"))
    assert batch.errors and "KeyError" in batch.errors[0].message and "no such column" in batch.errors[0].message
