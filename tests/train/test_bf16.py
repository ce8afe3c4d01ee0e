"""bf16 as on GPUs: bf16 weights with fp32 master weights, fp32 sampling decisions, SDPA in fp32 on the CPU,
and `mmreason sft` / `train` / `eval` end to end with model.dtype=bfloat16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmreason.cli import main
from mmreason.models import ModelConfig, load_model
from mmreason.models.cpu_attention import sdpa_fp32_attention
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.row_sampling import RowSeededSampling, inverse_cdf_draw, row_seeds
from mmreason.train.precision import MasterWeightAdamW

ROOT = Path(__file__).resolve().parents[2]


def test_master_weights_keep_updates_below_bf16_resolution():
    """AdamW moves a weight by about lr per step; 1e-4 is far below bf16's spacing at 1.0 (2^-7), so plain AdamW
    on the bf16 weight never moves it, while the fp32 master accumulates 100 steps to about 0.99."""
    plain, mixed = (torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16)) for _ in range(2))
    opt_plain = torch.optim.AdamW([plain], lr=1e-4, weight_decay=0.0)
    opt_mixed = MasterWeightAdamW([{"params": [mixed], "name": "language"}], lr=1e-4, weight_decay=0.0)
    assert opt_mixed.param_groups[0]["params"][0].dtype == torch.float32 and opt_mixed.param_groups[0]["name"]
    for _ in range(100):
        for p, opt in ((plain, opt_plain), (mixed, opt_mixed)):
            p.grad = torch.ones_like(p)
            opt.step()
            opt.zero_grad()
            assert p.grad is None
    assert torch.equal(plain, torch.ones_like(plain))  # every update rounded away
    master = opt_mixed.param_groups[0]["params"][0]
    assert master.dtype == torch.float32 and mixed.dtype == torch.bfloat16
    assert 0.9895 < master[0].item() < 0.9905  # 1 - 100 x 1e-4
    assert torch.equal(mixed, master.to(torch.bfloat16))  # the live weight is the rounded master
    assert opt_mixed.state[master]["exp_avg"].dtype == torch.float32
    mixed.data.fill_(0.5)  # weights loaded into the model (a resumed run): the masters follow on load_state_dict
    opt_mixed.load_state_dict(opt_mixed.state_dict())
    assert master[0].item() == 0.5


def test_sampling_decisions_are_made_in_fp32_from_bf16_logits():
    """The same seeds draw the same tokens from bf16 logits as from those logits upcast to fp32; drawing from
    probabilities rounded to bf16 instead would change some draws (the check can fail)."""
    g = torch.Generator().manual_seed(0)
    scores = (torch.randn(64, 500, generator=g) * 3).bfloat16()
    scores[:, 7] = float("-inf")  # a suppressed token
    settings = GenerationSettings(max_new_tokens=1, temperature=0.7, top_p=0.9)
    seeds = row_seeds(5, 64)
    from_bf16 = RowSeededSampling(seeds, settings)(None, scores)
    from_fp32 = RowSeededSampling(seeds, settings)(None, scores.float())
    assert from_bf16.dtype == torch.bfloat16
    picks = from_bf16.argmax(-1)
    assert torch.equal(picks, from_fp32.argmax(-1)) and not (picks == 7).any()
    probs = (scores.float() / 0.7).softmax(-1).repeat(64, 1)  # 4096 draws
    uniforms = torch.rand(probs.shape[0], generator=g, dtype=torch.float64)
    assert not torch.equal(inverse_cdf_draw(probs.bfloat16(), uniforms), inverse_cdf_draw(probs, uniforms))


def test_bf16_attention_on_cpu_runs_sdpa_in_fp32(tiny_model_dir):
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="bfloat16"), trainable=False)
    assert model.config._attn_implementation == "sdpa_fp32" and model.dtype == torch.bfloat16
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, n, 32, generator=g).bfloat16() for n in (5, 9, 9))
    module = torch.nn.Module()
    module.is_causal = False
    out, _ = sdpa_fp32_attention(module, q, k, v, None, scaling=32**-0.5)
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert out.dtype == torch.bfloat16 and out.shape == (2, 5, 2, 32)  # transformers' [batch, query, heads, dim]
    torch.testing.assert_close(out, want.transpose(1, 2).bfloat16(), atol=0, rtol=0)


def _metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_bf16_sft_train_and_eval_end_to_end(tiny_model_dir, shapes_cache, tmp_path):
    """model.dtype=bfloat16 through the real entry points: a 2-step SFT, 2 GRPO steps from its checkpoint, and
    `mmreason eval` of the result in bf16; weights stay bf16, change, and the losses are finite."""
    sft, out, results = tmp_path / "sft", tmp_path / "grpo", tmp_path / "results"
    assert (
        main(
            [
                "sft",
                str(ROOT / "configs" / "quickstart_sft.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={sft}",
                "model.dtype=bfloat16",
                "max_steps=2",
                "save_steps=2",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                str(ROOT / "configs" / "quickstart.yaml"),
                f"model.name_or_path={sft}/checkpoint-2/model",
                f"output_dir={out}",
                "model.dtype=bfloat16",
                "max_steps=2",
                "save_steps=2",
                "eval_steps=0",
                "prompts_per_step=2",
                "rollout.num_generations=4",
                "log_completions_steps=0",
                "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
            ]
        )
        == 0
    )
    before = load_file(Path(tiny_model_dir) / "model.safetensors")
    after = load_file(out / "checkpoint-2" / "model" / "model.safetensors")
    assert {t.dtype for t in after.values()} == {torch.bfloat16}
    assert [k for k in before if not torch.equal(before[k].bfloat16(), after[k])], "no parameter changed"
    for run in (sft, out):
        rows = _metrics(run)
        assert len(rows) == 2 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
        assert "dtype: bfloat16" in (run / "config.yaml").read_text()
    assert (
        main(
            [
                "eval",
                "--model",
                str(out),
                "--tasks",
                "shapes",
                "--limit",
                "4",
                "--model_args",
                "dtype=bfloat16",
                "--gen_kwargs",
                "max_new_tokens=4",
                "--output_path",
                str(results),
            ]
        )
        == 0
    )
    report = json.loads(next(results.rglob("*_results.json")).read_text())
    assert report["config"]["dtype"] == "bfloat16" and report["config"]["attn_implementation"] == "sdpa_fp32"
    assert report["results"]["shapes"]["n"] == 4 and report["results"]["shapes"]["n_failed"] == 0
