"""`mmreason export` read by vLLM: the session's shared ``mmreason vllm-serve`` engine (tests/rollout_vllm/conftest.py;
no engine of its own) loads an exported run's folder as it is written (``/reload_weights`` on the folder: vLLM's
own weight loader on the exported safetensors and their names), and its greedy completions and log-probs equal
the trained policy's in HF. Skipped where vLLM is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

vllm = pytest.importorskip("vllm")

from mmreason.cli import main  # noqa: E402
from tests.rollout_vllm.helpers import ROOT  # noqa: E402
from tests.rollout_vllm.helpers import assert_rollout_logprobs_are_the_trainers as _assert_logprobs  # noqa: E402

pytestmark = pytest.mark.vllm


def _sharp_base(tiny_model_dir, folder: Path) -> Path:
    """The tiny model with its LM head sharpened (x 30): greedy decoding has clear winners."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    model = AutoModelForImageTextToText.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    model.save_pretrained(folder)
    AutoProcessor.from_pretrained(str(tiny_model_dir)).save_pretrained(folder)
    return folder


def test_vllm_loads_an_exported_run_with_the_policys_outputs(server, tiny_model_dir, shapes_cache, tmp_path):
    from mmreason.models import ModelConfig, load_model, load_processor
    from mmreason.rollout.backends.vllm_client import SMALL_REPLY, VLLMClient
    from mmreason.rollout.generate import GenerationSettings, generate_groups
    from mmreason.rollout.prompts import build_prompt
    from mmreason.types import Sample

    base = _sharp_base(tiny_model_dir, tmp_path / "base")
    run = tmp_path / "run"
    overrides = ["rollout.num_generations=4", "rollout.max_completion_length=4", "prompts_per_step=2"]
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={base}",
                f"output_dir={run}",
                "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
                *overrides,
                "max_steps=1",
                "learning_rate=3e-2",
                "log_completions_steps=0",
                "num_threads=1",
                "eval_steps=0",
            ]
        )
        == 0
    )
    _, port = server
    processor = load_processor(run / "checkpoint-1" / "model")
    client = VLLMClient("127.0.0.1", port, processor.tokenizer, server_timeout=5)
    try:
        out = client.sync_dir.parent / f"export-{tmp_path.name}"  # inside the server's weights_dir
        assert main(["export", str(run), str(out), "--dtype", "float32"]) == 0
        client._post(client.servers[0], "/reload_weights", {"path": str(out)}, 600, "reload", max_reply=SMALL_REPLY)
        samples = [
            Sample(
                id="image",
                messages=[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour?"}]}],
                images=[Image.new("RGB", (112, 84), (200, 30, 30))],
            ),
            Sample(id="text", messages=[{"role": "user", "content": "What is the answer?"}]),
        ]
        exported_processor = load_processor(out)
        prompts = [build_prompt(exported_processor, s, max_prompt_length=1024) for s in samples]
        greedy = GenerationSettings(max_new_tokens=8, temperature=0.0)
        served = client.generate_groups(prompts, [0, 1], 1, greedy, [0, 1])
        policy = load_model(
            ModelConfig(name_or_path=str(run / "checkpoint-1" / "model"), dtype="float32"), trainable=False
        )
        hf = generate_groups(policy, processor, prompts, [0, 1], 1, settings=greedy, seeds=[0, 1])
        assert [t.token_ids.tolist() for t in served] == [t.token_ids.tolist() for t in hf]
        _assert_logprobs(policy, processor, served)
        base_rows = generate_groups(
            load_model(ModelConfig(name_or_path=str(base), dtype="float32"), trainable=False),
            processor,
            prompts,
            [0, 1],
            1,
            settings=greedy,
            seeds=[0, 1],
        )
        assert [t.token_ids.tolist() for t in base_rows] != [t.token_ids.tolist() for t in hf]  # the step counts
    finally:
        client.close()
