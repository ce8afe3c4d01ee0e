"""The trainer's log-probs are those of the distribution the rollouts were sampled from: logits divided by
``rollout.temperature`` with the suppressed vision specials removed, equal to generate's processed scores."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from PIL import Image

from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import GenerationSettings, eos_token_ids, generate_group, suppressed_token_ids
from mmreason.rollout.prompts import build_prompt
from mmreason.train.update import sampling_options
from mmreason.types import Sample

TEMPERATURE = 0.7


def _generate_with_scores(model, processor, prompt, n: int, seed: int):
    """What `sample_tokens` draws, plus generate's processed scores (temperature warper, suppression)."""
    tok = processor.tokenizer
    torch.manual_seed(seed)
    out = model.generate(
        input_ids=prompt.input_ids[None], attention_mask=torch.ones_like(prompt.input_ids)[None],
        mm_token_type_ids=prompt.mm_token_type_ids[None], **prompt.visual, num_return_sequences=n,
        do_sample=True, temperature=TEMPERATURE, top_p=1.0, top_k=0, max_new_tokens=8,
        eos_token_id=eos_token_ids(tok), pad_token_id=tok.pad_token_id, suppress_tokens=suppressed_token_ids(tok),
        output_scores=True, return_dict_in_generate=True)
    scores = torch.stack(out.scores, dim=1).log_softmax(-1)  # [n, L, V]
    new = out.sequences[:, prompt.length:]  # [n, L]
    return new, scores.gather(-1, new[..., None]).squeeze(-1)  # sampled tokens' log-probs under the sampler


def test_trainer_logprobs_equal_generate_processed_scores(tiny):
    model, processor = tiny
    image = Image.new("RGB", (84, 56), "teal")
    sample = Sample(id="t", messages=[{"role": "user", "content": [{"type": "image"},
                                                                   {"type": "text", "text": "Colour?"}]}],
                    answer="teal", images=[image])
    prompt = build_prompt(processor, sample, max_prompt_length=512)
    settings = GenerationSettings(max_new_tokens=8, temperature=TEMPERATURE)
    trajs = generate_group(model, processor, prompt, 0, 4, settings, seed=5)
    new, expected = _generate_with_scores(model, processor, prompt, 4, seed=5)
    run = SimpleNamespace(cfg=SimpleNamespace(rollout=SimpleNamespace(temperature=TEMPERATURE)), processor=processor)
    options = sampling_options(run)  # what the trainer's policy update passes
    assert options["temperature"] == TEMPERATURE
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    with torch.no_grad():
        trainer, _ = token_logprobs(model, batch, **options)
        raw, _ = token_logprobs(model, batch)  # the old behaviour: raw logits, nothing suppressed
    for row, t in enumerate(trajs):
        n = t.completion_length
        assert torch.equal(t.token_ids[prompt.length:], new[row, :n])  # the same draws as generate's
        got = trainer[row, prompt.length: prompt.length + n]
        torch.testing.assert_close(got, expected[row, :n].float(), atol=1e-5, rtol=0)
        # Negative control: raw logits differ from the sampler's distribution by far more than the tolerance.
        assert (raw[row, prompt.length: prompt.length + n] - expected[row, :n]).abs().max() > 1e-3
    assert torch.isfinite(trainer).all()  # the prompt's <|image_pad|> tokens are suppressed, not -inf


def test_lm_head_runs_only_on_completion_positions_with_the_same_logprobs(tiny):
    """A long prompt's logits are never made; the completion log-probs equal the full-logits computation."""
    from mmreason.rl import logprobs_from_logits

    model, processor = tiny
    images = [Image.new("RGB", (112, 112), c) for c in ("red", "blue", "green")]
    content = [{"type": "image"}] * 3 + [{"type": "text", "text": "Which page is blue?"}]
    sample = Sample(id="doc", messages=[{"role": "user", "content": content}], answer="2", images=images)
    prompt = build_prompt(processor, sample, max_prompt_length=1024)
    trajs = generate_group(model, processor, prompt, 0, 3, GenerationSettings(max_new_tokens=6), seed=1)
    batch = collate(trajs, processor.tokenizer.pad_token_id)
    seen = []
    hook = model.lm_head.register_forward_hook(lambda mod, inputs, out: seen.append(inputs[0].shape[1]))
    try:
        with torch.no_grad():
            got, _ = token_logprobs(model, batch)
            full = model(**batch.model_kwargs(), use_cache=False).logits  # [N, T, V]: every position
    finally:
        hook.remove()
    t = batch.input_ids.shape[1]
    assert seen[0] == t - prompt.length + 1 and seen[0] < t // 4  # prompt of ~60 visual tokens: no logits
    want = logprobs_from_logits(full[:, :-1], batch.input_ids[:, 1:])
    mask = batch.action_mask[:, 1:].bool()
    torch.testing.assert_close(got[:, 1:][mask], want[mask], atol=1e-5, rtol=0)
