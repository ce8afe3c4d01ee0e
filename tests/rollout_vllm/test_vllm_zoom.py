"""An image-returning tool through the colocated vLLM engine: the zoom example (examples/environments/zoom.py)
on the generic pack with ``rollout.backend=vllm``, the tiny model taught to call it (conftest ``zoom_model``).

The crop enters the next turn with its visual tokens through the engine (each turn's request is the trainer's
token ids with the images shown so far; the engine's expanded prompt must equal the trainer's ids, or the row is
an error: ``checked_rows``), and the trainer scores what the engine sampled with the engine's own log-probs:
``mismatch/after_media_*``, the gap on the assistant turns after an observation that showed the crop, is float
rounding. Skipped where vLLM is not installed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm")

from tests.rollout_vllm.helpers import ROOT, zoom_args  # noqa: E402

pytestmark = pytest.mark.vllm


def test_the_zoom_tools_crop_reaches_the_engine_and_the_trainer_scores_its_samples(
    zoom_model, shapes_cache, tmp_path, monkeypatch
):
    """One step: episodes zoomed (``env/tool_images`` > 0), the turns after the crop were scored
    (``mismatch/after_media_*`` logged: their observation held the crop's visual tokens), and the sampler's
    log-probs on them are the trainer's to 1e-3, the bound the engine's single-turn agreement tests use
    (tests/rollout_vllm/helpers.py ``assert_rollout_logprobs_are_the_trainers``; measured ~1e-6 on CPU fp32:
    docs/extending.md "Write an environment")."""
    from mmreason.cli import main
    from mmreason.rollout.backends.vllm_engine import VLLMBackend

    model, data = zoom_model
    monkeypatch.chdir(ROOT)  # the recipe names the example by its path from the repository root
    seen = []  # per context sent to the engine: (images in the request, image pads in its ids)
    sample = VLLMBackend.sample

    def watched(self, prompts, *args, **kwargs):
        pad = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        seen.extend((len(p.images), int((p.input_ids == pad).sum())) for p in prompts)
        return sample(self, prompts, *args, **kwargs)  # its rows are checked: the engine's ids are these

    monkeypatch.setattr(VLLMBackend, "sample", watched)
    out = tmp_path / "run"
    assert main(zoom_args(model, data, out, "max_steps=1")) == 0
    # the prompt's 112 x 112 image is 16 visual tokens; a later turn's request adds the crop (12544 px: 16 more)
    assert (1, 16) in seen and (2, 32) in seen, seen
    (row,) = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert row["env/tool_images"] > 0 and row["count/env_faults"] == 0 and row["count/unseen_media"] == 0, row
    assert 0 <= row["mismatch/after_media_max"] < 1e-3, row
    assert row["mismatch/after_media_mean"] <= row["mismatch/after_media_max"]
    assert row["mismatch/logprob_abs_diff_max"] < 1e-3 and row["mismatch/is_weight_mean"] == pytest.approx(1, abs=1e-3)
