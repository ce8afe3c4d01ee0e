"""A LoRA policy reaches the vLLM engine as an adapter (``rollout.vllm_lora: adapter``, the default): only the
adapter's weights are pushed, the engine samples with them, and its rows and log-probs are HF's on the PEFT
model. One engine for the module (vLLM's CPU build); the fallback rules need none."""

from __future__ import annotations

import shutil

import pytest
import torch
from PIL import Image

vllm = pytest.importorskip("vllm")

from mmreason.models import ModelConfig, load_model  # noqa: E402
from mmreason.rollout.backends.vllm_lora import adapter_plan  # noqa: E402
from mmreason.rollout.generate import GenerationSettings, generate_groups  # noqa: E402
from mmreason.rollout.prompts import build_prompt  # noqa: E402
from mmreason.types import Sample  # noqa: E402
from tests.rollout_vllm.helpers import assert_rollout_logprobs_are_the_trainers, colocated_run  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def sharp_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with its LM head sharpened (x 30): greedy rows have clear winners, so two
    implementations agree on them without turning on float rounding."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("sharp") / "model"
    shutil.copytree(tiny_model_dir, out)
    state = load_file(str(out / "model.safetensors"))
    state["lm_head.weight"] = state["lm_head.weight"] * 30.0
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _lora(model_dir, **kw):
    return load_model(ModelConfig(name_or_path=str(model_dir), dtype="float32", lora=True, **kw), trainable=True)


def test_which_lora_policies_are_served_as_adapters(tiny_model_dir):
    """The engine's rank is the smallest vLLM accepts at or above the adapter's; LoRA on the vision tower or
    fully trained modules fall back to merged pushes, saying why; a model without LoRA has nothing to say."""
    plan, why = adapter_plan(_lora(tiny_model_dir, lora_r=5), tiny_model_dir)
    assert plan is not None and plan.max_lora_rank == 8 and why == ""
    assert adapter_plan(_lora(tiny_model_dir, lora_r=16), tiny_model_dir)[0].max_lora_rank == 16
    plan, why = adapter_plan(_lora(tiny_model_dir, lora_r=8, lora_include_vision=True), tiny_model_dir)
    assert plan is None and "outside the language model" in why and "visual" in why
    plan, why = adapter_plan(_lora(tiny_model_dir, lora_r=8), tiny_model_dir, sharded=True)
    assert plan is None and "sharded" in why
    full = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=True)
    assert adapter_plan(full, tiny_model_dir) == (None, "")


def _prompts(processor):
    samples = [
        Sample(
            id="image",
            messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour?"}]}],
            images=[Image.new("RGB", (112, 84), (200, 30, 30))],
        ),
        Sample(id="text", messages=[{"role": "user", "content": "What is the answer?"}]),
    ]
    return [build_prompt(processor, s, max_prompt_length=512) for s in samples]


def _perturb_lora_b(model, seed: int) -> None:
    """LoRA's B starts at zero (the adapter changes nothing); random B makes every adapted layer count."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.3)


def _rows(trajectories):
    return [t.token_ids.tolist() for t in trajectories]


def test_a_lora_policy_is_pushed_as_an_adapter_and_samples_as_hf(sharp_model_dir, shapes_cache, tmp_path):
    from safetensors import safe_open

    from mmreason.train.grpo import train_step
    from mmreason.train.rollout_backend import close_backend

    run = colocated_run(
        sharp_model_dir,
        tmp_path,
        "model.lora=true",
        "model.lora_r=8",
        "rollout.num_generations=2",
        "rollout.max_completion_length=4",
        "prompts_per_step=2",
        "max_steps=1",
        "eval_steps=0",
        "num_threads=1",
    )
    backend = run.rollout_backend
    try:
        model, processor = run.accelerator.unwrap_model(run.model), run.processor
        assert backend.adapters is not None and backend.weight_group is None  # no full-weight path at all
        assert backend.llm.llm_engine.vllm_config.lora_config.max_lora_rank == 8
        prompts = _prompts(processor)
        greedy = GenerationSettings(max_new_tokens=8, temperature=0.0)
        model.eval()
        for push, seed in ((1, 0), (2, 1)):
            _perturb_lora_b(model, seed)
            backend.sync_weights(model)
            (adapter,) = backend.adapters.root.glob("adapter-*/adapter_model.safetensors")
            with safe_open(str(adapter), "pt") as f:
                keys = list(f.keys())
            assert keys and all("lora_A" in k or "lora_B" in k for k in keys)  # only the adapter was pushed
            assert not any(backend.sync_dir.iterdir())  # and no merged weights
            assert set(backend.llm.llm_engine.list_loras()) == {push}  # the previous adapter is gone
            ours = _rows(backend.generate_groups(prompts, [0, 1], 1, greedy, [0, 0]))
            assert ours == _rows(generate_groups(model, processor, prompts, [0, 1], 1, settings=greedy, seeds=[0, 0]))
            with model.disable_adapter():
                assert ours != _rows(
                    generate_groups(model, processor, prompts, [0, 1], 1, settings=greedy, seeds=[0, 0])
                )
        sampled = backend.generate_groups(prompts, [0, 1], 3, GenerationSettings(max_new_tokens=6), [4, 5])
        assert_rollout_logprobs_are_the_trainers(model, processor, sampled)
        model.train()
        row = train_step(run, 1)  # a GRPO step samples with the adapter and pushes the updated one
        assert row["mismatch/logprob_abs_diff_max"] < 1e-3 and set(backend.llm.llm_engine.list_loras()) == {3}
    finally:
        close_backend(run)
