"""The trainer's log-probs are those of the distribution the rollouts were sampled from: logits divided by
``rollout.temperature`` with the suppressed vision specials removed, equal to generate's processed scores."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch
from PIL import Image
from rollout_helpers import sample_tokens

from mmreason.rollout import generate, row_sampling
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings, generate_group
from mmreason.rollout.prompts import build_prompt
from mmreason.train.update import sampling_options
from mmreason.types import Sample

TEMPERATURE = 0.7


class _Recording(row_sampling.RowSeededSampling):
    """The sampler, also keeping each step's log-probabilities of the distribution it draws from [N, V]."""

    steps: list[torch.Tensor] = []

    def __call__(self, input_ids, scores):
        s = self.settings
        _Recording.steps.append(row_sampling.sampling_probabilities(scores, s.temperature, s.top_k, s.top_p).log())
        return super().__call__(input_ids, scores)


def _generate_with_scores(model, processor, prompt, n: int, seed: int, monkeypatch):
    """What `generate_group` draws, plus the log-probs the sampler drew them with (after generate's
    suppression of vision specials and the sampler's temperature)."""
    _Recording.steps = []
    monkeypatch.setattr(generate, "RowSeededSampling", _Recording)
    new = sample_tokens(
        model,
        processor.tokenizer,
        prompt.input_ids,
        prompt.mm_token_type_ids,
        prompt.visual,
        n,
        GenerationSettings(max_new_tokens=8, temperature=TEMPERATURE),
        seed,
    )
    scores = torch.stack(_Recording.steps, dim=1)  # [n, L, V]
    return new, scores.gather(-1, new[..., None]).squeeze(-1)  # sampled tokens' log-probs under the sampler


def test_trainer_logprobs_equal_generate_processed_scores(tiny, monkeypatch):
    model, processor = tiny
    image = Image.new("RGB", (84, 56), "teal")
    sample = Sample(
        id="t",
        messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}],
        answer="teal",
        images=[image],
    )
    prompt = build_prompt(processor, sample, max_prompt_length=512)
    settings = GenerationSettings(max_new_tokens=8, temperature=TEMPERATURE)
    trajs = generate_group(model, processor, prompt, 0, 4, settings=settings, seed=5)
    new, expected = _generate_with_scores(model, processor, prompt, 4, 5, monkeypatch)
    run = SimpleNamespace(cfg=SimpleNamespace(rollout=SimpleNamespace(temperature=TEMPERATURE)), processor=processor)
    options = sampling_options(run)  # what the trainer's policy update passes
    assert options["temperature"] == TEMPERATURE
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, batch, **options)
        raw, _ = token_logprobs(model, batch)  # the old behaviour: raw logits, nothing suppressed
    for row, t in enumerate(trajs):
        n = t.completion_length
        assert torch.equal(t.token_ids[prompt.length :], new[row, :n])  # the same draws as generate's
        got = trainer[row, prompt.length : prompt.length + n]
        torch.testing.assert_close(got, expected[row, :n].float(), atol=1e-5, rtol=0)
        # Negative control: raw logits differ from the sampler's distribution by far more than the tolerance.
        assert (raw[row, prompt.length : prompt.length + n] - expected[row, :n]).abs().max() > 1e-3
    assert torch.isfinite(trainer).all()  # the prompt's <|image_pad|> tokens are suppressed, not -inf


def test_lm_head_runs_only_on_completion_positions_with_the_same_logprobs(tiny):
    """The LM head sees one row per completion token (no prompt, no padding, no last position); the
    completion log-probs equal the full-logits computation."""
    from mmreason.rl import logprobs_from_logits

    model, processor = tiny
    images = [Image.new("RGB", (112, 112), c) for c in ("red", "blue", "green")]
    content = [{"type": "image"}] * 3 + [{"type": "text", "text": "Which page is blue?"}]
    sample = Sample(id="doc", messages=[{"role": "user", "content": content}], answer="2", images=images)
    prompt = build_prompt(processor, sample, max_prompt_length=1024)
    trajs = generate_group(model, processor, prompt, 0, 3, settings=GenerationSettings(max_new_tokens=6), seed=1)
    cut = trajs[1].token_ids.numel() - 3  # a shorter row: the batch has padding the head must not see
    trajs[1] = dataclasses.replace(
        trajs[1],
        token_ids=trajs[1].token_ids[:cut],
        action_mask=trajs[1].action_mask[:cut],
        mm_token_type_ids=trajs[1].mm_token_type_ids[:cut],
    )
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    seen = []
    hook = model.lm_head.register_forward_hook(lambda mod, inputs, out: seen.append(tuple(inputs[0].shape[:2])))
    try:
        with torch.no_grad():
            got, _ = token_logprobs(model, batch)
            full = model(**batch.model_kwargs(), use_cache=False).logits  # [N, T, V]: every position
    finally:
        hook.remove()
    lengths = [t.completion_length for t in trajs]
    assert len(set(lengths)) > 1
    assert seen[0] == (1, sum(lengths)) == (1, int(batch.action_mask.sum()))
    want = logprobs_from_logits(full[:, :-1], batch.input_ids[:, 1:])
    mask = batch.action_mask[:, 1:].bool()
    torch.testing.assert_close(got[:, 1:][mask], want[mask], atol=1e-5, rtol=0)
