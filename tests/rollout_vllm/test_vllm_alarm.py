"""The ``logprob_mismatch`` alarm on real vLLM runs: the quickstart GRPO recipe (the main job's second stage)
on the tiny model with ``rollout.backend=vllm``. With the trainer's weights in the engine it stays quiet; when
every push (after each step: the engine starts on the model directory) hands the engine perturbed weights,
the trainer's log-probs of what the engine sampled differ from step 2 on and the alarm fires at step 4, the
third such step in a row (its default window). Skipped where vLLM is not
installed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

vllm = pytest.importorskip("vllm")

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parents[2]


def _run(model_dir, out, steps, *extra: str) -> list[dict]:
    from mmreason.cli import main

    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={model_dir}",
                f"output_dir={out}",
                "rollout.backend=vllm",
                "rollout.num_generations=4",
                "rollout.max_completion_length=4",
                "prompts_per_step=2",
                f"max_steps={steps}",
                "eval_steps=0",
                "save_steps=0",
                "log_completions_steps=0",
                "num_threads=1",
                *extra,
            ]
        )
        == 0
    )
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("perturbed", [False, True], ids=["trainer_weights", "perturbed_engine"])
def test_logprob_mismatch_alarm_fires_only_when_the_engine_holds_other_weights(
    perturbed, tiny_model_dir, shapes_cache, tmp_path, monkeypatch
):
    from mmreason.rollout.backends import vllm_engine

    if perturbed:
        write = vllm_engine.write_weights

        def write_perturbed(model, out_dir, state=None):
            state = dict(state if state is not None else vllm_engine.merged_state_dict(model))
            generator = torch.Generator().manual_seed(0)
            for name, w in state.items():
                if w.is_floating_point() and w.ndim == 2 and "visual" not in name:
                    state[name] = w + torch.randn(w.shape, generator=generator) * 0.5
            return write(model, out_dir, state)

        monkeypatch.setattr(vllm_engine, "write_weights", write_perturbed)
    out = tmp_path / "run"
    # the perturbation sits in the directory push (the collective push sends the trainer's tensors as they are)
    rows = (
        _run(tiny_model_dir, out, 4, "rollout.vllm_weight_sync=directory")
        if perturbed
        else _run(tiny_model_dir, out, 3)
    )
    assert [r["step"] for r in rows] == [1, 2, 3, 4][: len(rows)] and len(rows) == (4 if perturbed else 3)
    gaps = [r["mismatch/logprob_abs_diff_mean"] for r in rows]
    alarm = [r["alarm/logprob_mismatch"] for r in rows]
    events = (out / "events.log").read_text() if (out / "events.log").exists() else ""
    if perturbed:
        assert gaps[0] < 1e-3 and min(gaps[1:]) > 0.1, gaps  # over the alarm's threshold from step 2
        assert alarm == [0.0, 0.0, 0.0, 1.0]  # the third step in a row
        assert '"alarm": "logprob_mismatch"' in events
    else:
        assert max(gaps) < 1e-3, gaps
        assert alarm == [0.0, 0.0, 0.0] and "logprob_mismatch" not in events
