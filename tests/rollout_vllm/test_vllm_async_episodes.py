"""Asynchronous episodes through the colocated vLLM engine: the zoom example's episodes
(examples/environments/zoom.py, the tiny model taught to call it: conftest ``zoom_model``) generated up to two
steps ahead (``rollout.async_generation=true``, ``rollout.max_staleness=2``), each turn's sampling call holding
the engine (train/async_rollouts.py), a weight push landing between two turns of an episode in flight. Skipped
where vLLM is not installed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from tests.rollout_vllm.helpers import ROOT, zoom_args  # noqa: E402

pytestmark = pytest.mark.vllm


def test_zoom_episodes_two_steps_ahead_on_the_engine_record_versions_and_staleness(
    zoom_model, shapes_cache, tmp_path, monkeypatch
):
    """Three steps finish; every step's sampled tokens have versions (``async/version_min`` / ``_max``: the
    per-token versions, -1 nowhere among them) no newer than the weights the step trains and no older than
    ``max_staleness`` allows, the staleness metrics are logged, the crops are shown (``env/tool_images``),
    the sampler-trainer gap after the crop is logged, and the tool calls the episodes got wrong are counted
    over the run (``count/bad_tool_calls``, the sum of the steps' ``env/bad_tool_calls``) as a synchronous
    run counts them."""
    from mmreason.cli import main

    model, data = zoom_model
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    extra = ("max_steps=3", "rollout.async_generation=true", "rollout.max_staleness=2")
    assert main(zoom_args(model, data, out, *extra)) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "async/staleness_mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3], rows
    for r in steps:
        s = r["step"]
        assert 0 <= r["async/version_min"] <= r["async/version_max"] <= s - 1, r
        assert 0 <= r["async/staleness_mean"] <= r["async/max_staleness"] <= 2, r
        assert (s - 1) - r["async/version_min"] == r["async/max_staleness"]
        assert 0 <= r["async/token_staleness_mean"] <= 2 and 0 <= r["async/partial_share"] <= 1
        assert r["async/generation_wait_s"] >= 0 and r["count/env_faults"] == 0
        assert r["env/tool_images"] > 0 and "mismatch/after_media_max" in r
    assert steps[0]["async/max_staleness"] == 0  # nothing to be behind before the first update
    assert steps[-1]["count/bad_tool_calls"] == sum(r["env/bad_tool_calls"] for r in steps) > 0
