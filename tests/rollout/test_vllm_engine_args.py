"""What the trainer builds its vLLM engine with and what each request carries, checked with the recording
stand-in for vLLM (tests/rollout/recording_vllm.py; no vLLM needed): the batching arguments sized as the peers'
colocate modes size them and overridable per key, and the vision specials suppressed by one engine-wide logits
processor instead of a vocabulary-sized ``allowed_token_ids`` on every request. tests/rollout_vllm checks that
the real engine takes both (its scheduler's settings, and no vision special sampled)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mmreason.config import ConfigError, load_config
from mmreason.rollout.backends.vllm_engine import VLLMSettings
from mmreason.rollout.backends.vllm_placement import SUPPRESS_KEY, SUPPRESS_PROCESSOR, ModelFacts, engine_kwargs
from mmreason.train.config import TrainConfig
from tests.rollout.recording_vllm import use_recording_vllm


def _run(tiny_model_dir, *overrides):
    from mmreason.models import load_processor

    cfg = load_config(
        TrainConfig,
        None,
        ["rollout.backend=vllm", f"model.name_or_path={tiny_model_dir}", "data.max_prompt_length=1024", *overrides],
    )
    acc = SimpleNamespace(
        process_index=0,
        local_process_index=0,
        num_processes=1,
        is_main_process=True,
        unwrap_model=lambda m: m,
        distributed_type=SimpleNamespace(value="NO"),
    )
    return SimpleNamespace(cfg=cfg, accelerator=acc, model=SimpleNamespace(), processor=load_processor(tiny_model_dir))


def _batching(kwargs: dict) -> tuple:
    return kwargs["enable_chunked_prefill"], kwargs["max_num_batched_tokens"], kwargs.get("max_num_seqs")


def test_batching_defaults_are_the_peers_colocate_values_and_each_key_overrides():
    """GPU: chunked prefill on with TRL's 4096-token budget; CPU: chunked prefill off (seeded rows) with a
    budget that holds a whole prompt (the context, at least 4096). Today's engine had a 16384 floor and chunked
    prefill off everywhere."""
    short, long = ModelFacts("model", 1024), ModelFacts("model", 9000)
    assert _batching(engine_kwargs(VLLMSettings(), short, on_cpu=False)) == (True, 4096, None)
    assert _batching(engine_kwargs(VLLMSettings(), long, on_cpu=False)) == (True, 4096, None)
    assert _batching(engine_kwargs(VLLMSettings(), short, on_cpu=True)) == (False, 4096, None)
    assert _batching(engine_kwargs(VLLMSettings(), long, on_cpu=True)) == (False, 9000, None)
    chosen = VLLMSettings(max_num_seqs=48, max_num_batched_tokens=8192, enable_chunked_prefill=False)
    assert _batching(engine_kwargs(chosen, long, on_cpu=False)) == (False, 8192, 48)
    many = VLLMSettings(max_num_seqs=10_000)  # vLLM refuses more rows than tokens per step
    assert _batching(engine_kwargs(many, short, on_cpu=False)) == (True, 4096, 4096)
    server = engine_kwargs(VLLMSettings(mode="server"), short, on_cpu=False)
    assert _batching(server) == (True, 4096, None)  # vllm-serve: vLLM's own max_num_seqs


def test_the_trainer_sizes_its_engine_by_the_rows_of_one_step(tiny_model_dir, monkeypatch):
    """The colocated engine's ``max_num_seqs`` is what one step samples in this process (prompts_per_step x G,
    as TRL's per-device batch x steps per generation); each ``rollout.vllm_*`` batching key reaches vLLM."""
    from mmreason.train.rollout_backend import make_backend

    llm = use_recording_vllm(monkeypatch)
    monkeypatch.setattr("mmreason.train.rollout_backend.lora_rank", lambda run: None)
    make_backend(_run(tiny_model_dir, "prompts_per_step=3", "rollout.num_generations=5"))
    assert _batching(llm.built[0].kwargs) == (False, 4096, 15)  # on CPU
    make_backend(_run(tiny_model_dir, "rollout.vllm_max_num_seqs=7", "rollout.vllm_max_num_batched_tokens=6000"))
    assert _batching(llm.built[1].kwargs) == (False, 6000, 7)


@pytest.mark.parametrize(
    ("overrides", "on_cpu", "message"),
    [
        (["rollout.vllm_enable_chunked_prefill=true"], True, "needs a GPU"),
        (["rollout.vllm_max_num_batched_tokens=512"], True, "< the engine's context"),
        (["rollout.vllm_max_num_batched_tokens=512", "rollout.vllm_enable_chunked_prefill=false"], False, "context"),
    ],
)
def test_batching_that_cannot_work_is_refused_in_one_line_naming_the_key(overrides, on_cpu, message):
    from mmreason.train.rollout_backend import check_engine_settings

    cfg = load_config(TrainConfig, None, ["rollout.backend=vllm", *overrides])
    with pytest.raises(ConfigError, match=message) as info:
        check_engine_settings(cfg, on_cpu=on_cpu)
    assert "\n" not in str(info.value) and str(info.value).startswith("rollout.vllm_")
    # with chunked prefill (GPU) a budget below the context is what the peers run
    gpu = load_config(TrainConfig, None, ["rollout.backend=vllm", "rollout.vllm_max_num_batched_tokens=512"])
    check_engine_settings(gpu, on_cpu=False)


def test_requests_carry_no_vocabulary_list_and_the_engine_masks_the_vision_specials(tiny_model_dir, monkeypatch):
    """Each request's sampling parameters name no ``allowed_token_ids`` (today: the vocabulary less ~10 ids,
    on every row); the engine is built with the suppressing logits processor and exactly the ids the HF path
    suppresses (``suppressed_token_ids``)."""
    from mmreason.rollout.generate import GenerationSettings, suppressed_token_ids
    from mmreason.train.rollout_backend import make_backend

    llm = use_recording_vllm(monkeypatch)
    monkeypatch.setattr("mmreason.train.rollout_backend.lora_rank", lambda run: None)
    run = _run(tiny_model_dir)
    backend = make_backend(run)
    params = backend.sampling_params(GenerationSettings(max_new_tokens=4, temperature=1.0), seed=3)
    assert getattr(params, "allowed_token_ids", None) is None and getattr(params, "logit_bias", None) is None
    kwargs = llm.built[0].kwargs
    banned = suppressed_token_ids(run.processor.tokenizer)
    assert len(banned) >= 5  # Qwen2.5-VL's vision specials
    assert kwargs["logits_processors"] == [SUPPRESS_PROCESSOR]
    assert kwargs["additional_config"] == {SUPPRESS_KEY: banned}
