"""CUDA checks, skipped without a GPU: the shared-prefix update on the device, half precision with the
attention the loader picks (flash-attention 2 when installed), and a short GRPO run of the real CLI.
`bash scripts/gpu_check.sh` runs these first of its checks (docs/training.md, "GPU check")."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from mmreason.bench.update_throughput import Workload, build_model, synthetic_group
from mmreason.cli import main
from mmreason.models.loading import resolve_attn_implementation
from mmreason.rollout import shared_prefix
from mmreason.rollout.forward import collate, token_logprobs

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
ROOT = Path(__file__).resolve().parents[1]
WORK = Workload(pages=3, image_tokens=16, prompt_text=24, completion_len=12, num_generations=4)


def _logprobs(dtype: torch.dtype, attn: str):
    device = torch.device("cuda")
    model, ids = build_model("small", dtype, attn, device)
    trajs = synthetic_group(WORK, ids, model.config.text_config.vocab_size)
    for t in trajs:
        t.visual = [{k: v.to(device, dtype) if v.is_floating_point() else v.to(device) for k, v in t.visual[0].items()}]
    batch = collate(trajs, ids["<|endoftext|>"]).to(device)
    batch.visual["pixel_values"] = batch.visual["pixel_values"].to(dtype)
    assert shared_prefix.applies(model, trajs)
    plain, _ = token_logprobs(model, batch)
    shared, _ = shared_prefix.shared_prefix_logprobs(model, trajs, batch.input_ids.shape[1], ids["<|endoftext|>"])
    mask = batch.action_mask.bool()
    return plain[mask].float(), shared[mask].float(), model


def test_shared_prefix_equals_the_plain_update_on_cuda_fp32():
    plain, shared, _ = _logprobs(torch.float32, "sdpa")
    torch.testing.assert_close(shared, plain, atol=1e-4, rtol=0)


def test_half_precision_with_the_chosen_attention_stays_close_to_the_plain_path():
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    attn = resolve_attn_implementation("auto", dtype)
    if importlib.util.find_spec("flash_attn") is not None:
        assert attn == "flash_attention_2"
    plain, shared, model = _logprobs(dtype, attn)
    assert model.config._attn_implementation == attn
    assert (shared - plain).abs().mean() < 0.05  # bf16 rounding of a different (cached) computation order


def test_grpo_quickstart_runs_on_cuda(tmp_path):
    from mmreason.models.tiny import build_tiny_model

    model_dir = build_tiny_model(tmp_path / "model")
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={model_dir}",
                f"output_dir={out}",
                "max_steps=2",
                "eval_steps=0",
                "prompts_per_step=4",
                "rollout.num_generations=4",
                "save_steps=0",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
