"""HF generation records each sampled token's log-prob as the sampler drew it (``with_logprobs``;
``rollout.hf_sampler_logprobs``): in fp32 they are the trainer's recomputed log-probs (same weights, same
positions) to fp32 rounding, greedy and sampled; in bf16 they stay within a bf16-sized gap (on a CPU the cached
decoding loop and the full forward often agree to the bit: docs/vllm.md has the main job's figures). The trainer logs the gap as ``mismatch/*``
and weights the advantages only when ``rollout.hf_importance_sampling_correction`` asks."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from PIL import Image

from mmreason.cli import main
from mmreason.models import ModelConfig, load_model
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings, generate_groups
from mmreason.rollout.prompts import build_prompt
from mmreason.rollout.row_sampling import RowSeededSampling, stacked_logprobs
from mmreason.train.update import rollout_correction, sampling_options
from mmreason.types import Sample

ROOT = Path(__file__).resolve().parents[2]


def _prompts(processor):
    out = []
    for k, colour in enumerate(("teal", "red")):
        sample = Sample(
            id=f"s{k}",
            messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}],
            answer=colour,
            images=[Image.new("RGB", (84, 56), colour)],
        )
        out.append(build_prompt(processor, sample, max_prompt_length=512))
    return out


def _gap(model, processor, temperature: float):
    """(trajectories, |sampler - trainer| on the completion tokens [K]) for 2 prompts x 4 rows."""
    settings = GenerationSettings(max_new_tokens=8, temperature=temperature)
    trajs = generate_groups(
        model, processor, _prompts(processor), [0, 1], 4, settings=settings, seeds=[3, 4], with_logprobs=True
    )
    run = SimpleNamespace(cfg=SimpleNamespace(rollout=SimpleNamespace(temperature=temperature)), processor=processor)
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, batch, **sampling_options(run))  # [N, T] fp32
    diffs = []
    for row, t in enumerate(trajs):
        p, n = t.prompt_length, t.completion_length
        assert t.rollout_logprobs is not None and t.rollout_logprobs.shape == t.token_ids.shape
        assert not t.rollout_logprobs[:p].any()  # nothing on the prompt
        assert (t.rollout_logprobs[p:] <= 0).all()
        diffs.append((t.rollout_logprobs[p:] - trainer[row, p : p + n]).abs())
    return trajs, torch.cat(diffs)


@pytest.mark.parametrize("temperature", [0.7, 0.0])
def test_fp32_sampler_logprobs_equal_the_trainers(tiny, one_torch_thread, temperature):
    model, processor = tiny
    trajs, diff = _gap(model, processor, temperature)
    assert diff.numel() >= 8
    assert diff.max() < 1e-5
    if temperature > 0:  # not a constant: the sampled rows differ and their log-probs spread
        assert len({tuple(t.token_ids.tolist()) for t in trajs}) > 1
        assert torch.cat([t.rollout_logprobs for t in trajs]).min() < -0.5
    # Without the flag nothing is recorded (today's behaviour).
    plain = generate_groups(
        model,
        processor,
        _prompts(processor)[:1],
        [0],
        2,
        settings=GenerationSettings(max_new_tokens=4, temperature=temperature),
        seeds=[3],
    )
    assert all(t.rollout_logprobs is None for t in plain)


def test_bf16_gap_is_small(tiny_model_dir, tiny, one_torch_thread):
    _, processor = tiny
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="bfloat16"), trainable=False)
    trajs, diff = _gap(model, processor, 1.0)
    assert diff.numel() >= 8 and torch.cat([t.rollout_logprobs for t in trajs]).min() < -1.0  # real log-probs
    # bf16 keeps ~3 significant digits: a gap of a few bf16 roundings of |log p| ~ 6 is < 0.1 (the main
    # job's largest, docs/vllm.md: 3.4e-3); on this CPU the two agree to the bit
    assert diff.mean() < 1e-2 and diff.max() < 0.1


def _run(correct: bool):
    rollout = SimpleNamespace(
        vllm_importance_sampling_correction=True,
        vllm_importance_sampling_mode="token_truncate",
        vllm_importance_sampling_cap=2.0,
        vllm_importance_sampling_min=None,
        hf_importance_sampling_correction=correct,
        async_generation=False,  # corrects_with_sampler reads it (an asynchronous run always corrects)
    )
    return SimpleNamespace(cfg=SimpleNamespace(rollout=rollout), rollout_backend=None)


def test_trainer_logs_the_hf_gap_and_corrects_only_when_asked():
    ids = torch.tensor([5, 6, 7, 8, 9])
    t = SimpleNamespace(
        token_ids=ids,
        mm_token_type_ids=torch.tensor([0, 1, 0, 0, 0]),
        turns=[],
        rollout_logprobs=torch.tensor([0.0, 0.0, -1.0, -2.0, -0.5]),
    )
    old = torch.tensor([[0.0, 0.0, -1.0, -1.5, -0.5]])  # the trainer's: token 3 is exp(0.5) more likely
    mask = torch.tensor([[0, 0, 1, 1, 1]])
    advantages = torch.tensor([1.0])
    stats: dict = {}
    out = rollout_correction(_run(False), [t], old, mask, advantages, stats=stats)
    assert torch.equal(out, advantages)  # HF rollouts: no weights unless asked
    assert stats["mismatch/logprob_abs_diff_mean"] == [pytest.approx(0.5 / 3)]
    assert stats["mismatch/logprob_abs_diff_max"] == [pytest.approx(0.5)]
    assert stats["mismatch/near_vision_0_8"] == [pytest.approx(0.5 / 3)]
    out = rollout_correction(_run(True), [t], old, mask, advantages, stats={})
    torch.testing.assert_close(out, torch.tensor([[0.0, 0.0, 1.0, 1.6487213, 1.0]]))  # exp(0.5) < cap 2


def test_train_logs_the_hf_gap_end_to_end(tiny_model_dir, shapes_cache, tmp_path, one_torch_thread):
    """`mmreason train` with rollout.hf_sampler_logprobs (and the correction asked for): the step logs the
    mismatch metrics, in fp32 at rounding level, and the weights' mean, 1."""
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={out}",
                "max_steps=1",
                "save_steps=0",
                "eval_steps=0",
                "prompts_per_step=2",
                "rollout.num_generations=4",
                "rollout.max_completion_length=4",
                "log_completions_steps=0",
                "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
                "rollout.hf_sampler_logprobs=true",
                "rollout.hf_importance_sampling_correction=true",
            ]
        )
        == 0
    )
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert 0 <= row["mismatch/logprob_abs_diff_mean"] <= row["mismatch/logprob_abs_diff_max"] < 1e-5
    assert "mismatch/near_vision_8_32" in row or "mismatch/near_vision_32_128" in row
    assert row["mismatch/is_weight_mean"] == pytest.approx(1.0, abs=1e-5)


def test_recorded_logprob_is_of_the_truncated_renormalised_distribution():
    """top-p 0.6 over p = (0.5, 0.3, 0.2): the third token is cut (0.8 of the mass lies before it), the draw is
    from (0.625, 0.375, 0), and the recorded log-prob is of that distribution (vLLM's processed_logprobs)."""
    scores = torch.tensor([[0.5, 0.3, 0.2]]).log().repeat(16, 1)  # [16, 3]
    sampler = RowSeededSampling(list(range(16)), GenerationSettings(max_new_tokens=1, top_p=0.6), record_logprobs=True)
    picks = sampler(torch.zeros(16, 1, dtype=torch.long), scores).argmax(-1)  # [16]
    assert set(picks.tolist()) == {0, 1}
    want = torch.tensor([0.625, 0.375]).log()[picks]
    torch.testing.assert_close(stacked_logprobs(sampler.logprobs, 16)[:, 0], want)


def test_multi_turn_hf_episodes_carry_the_samplers_logprobs(tiny, one_torch_thread):
    """Episodes (assistant turns, tool observations with images) played with ``with_logprobs``: the sampler's
    log-probs on the assistant tokens equal the trainer's to fp32 rounding; 0 on prompt and observations."""
    from mmreason.rollout.multiturn import EpisodeStart, run_episodes
    from tests.rollout.test_multiturn import ZoomEnv, _coloured

    model, processor = tiny
    prompt = build_prompt(processor, _coloured("blue", 84), max_prompt_length=1024)
    settings = GenerationSettings(max_new_tokens=6, temperature=0.7, stop_strings=ZoomEnv.stop_strings)
    trajs = run_episodes(
        model,
        processor,
        [EpisodeStart(prompt, ZoomEnv(), 0, i) for i in range(2)],
        settings,
        max_turns=3,
        max_context=2048,
        seed=3,
        step=5,
        with_logprobs=True,
    )
    run = SimpleNamespace(cfg=SimpleNamespace(rollout=SimpleNamespace(temperature=0.7)), processor=processor)
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, batch, **sampling_options(run))  # [N, T]
    for row, t in enumerate(trajs):
        assert sum(u.role == "observation" for u in t.turns) >= 1
        mask = t.action_mask.bool()
        assert t.rollout_logprobs.shape == t.token_ids.shape and not t.rollout_logprobs[~mask].any()
        assert (t.rollout_logprobs[mask] < 0).all()
        got = t.rollout_logprobs[mask]
        torch.testing.assert_close(got, trainer[row, : mask.numel()][mask], atol=1e-5, rtol=0)
