"""Stage I (SFT on ALR traces) then stage II (evidence-aware GRPO) on generated documents with the tiny
model, through the real `mmreason sft` / `train` / `eval` entry points and the pack's tiny recipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "configs" / "docseeker"
# Overrides replace task_args as a whole, so each stage restates its EGRA settings.
DOCS = "n: 4, pages: '2..3', page_width: 170, egra_high_tokens: 16, egra_low_tokens: 8"
TINY = ["num_threads=1", "save_steps=0"]


# The recipe's rewards, but ANLS without its threshold: a mechanics test needs a reward that varies on the
# random model's output to get a non-zero gradient.
VARYING_REWARDS = (
    "rewards=[{name: docseeker_format, weight: 0.1}, {name: page_fbeta, weight: 0.3, kwargs: "
    "{beta: 2.0, index_base: 1}}, {name: anls, weight: 0.6, kwargs: {threshold: 0.0}}]"
)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_sft_then_grpo_then_eval(tiny_model_dir, shapes_cache, tmp_path):
    sft = tmp_path / "sft"
    assert (
        main(
            [
                "sft",
                str(CONFIGS / "docseeker_sft_tiny.yaml"),
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={sft}",
                "max_steps=2",
                "rollout.max_completion_length=96",
                f"data.task_args={{{DOCS}, egra_k: 0}}",
                *TINY,
            ]
        )
        == 0
    )
    assert [r["step"] for r in _rows(sft / "metrics.jsonl")] == [1, 2]
    stage1 = sft / "checkpoint-2" / "model"
    before = load_file(Path(tiny_model_dir) / "model.safetensors")
    after_sft = load_file(stage1 / "model.safetensors")
    assert any(not torch.equal(before[k], after_sft[k]) for k in before), "SFT changed no parameter"

    grpo = tmp_path / "grpo"
    assert (
        main(
            [
                "train",
                str(CONFIGS / "docseeker_grpo_tiny.yaml"),
                f"model.name_or_path={stage1}",
                f"output_dir={grpo}",
                "max_steps=2",
                "rollout.num_generations=2",
                "rollout.max_completion_length=8",
                f"data.task_args={{{DOCS}, egra_k: 1}}",
                VARYING_REWARDS,
                *TINY,
            ]
        )
        == 0
    )
    rows = _rows(grpo / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("rewards/docseeker_format/mean", "rewards/page_fbeta/mean", "rewards/anls/mean", "reward/mean", "kl"):
        assert all(key in r for r in rows), key
    completions = _rows(grpo / "completions.jsonl")
    assert completions and set(completions[0]["rewards"]) == {"docseeker_format", "page_fbeta", "anls"}
    after = load_file(grpo / "checkpoint-2" / "model" / "model.safetensors")
    assert any(not torch.equal(after_sft[k], after[k]) for k in after), "GRPO changed no parameter"

    from mmreason.tasks.docseeker.synth import generate

    data = generate(tmp_path / "evaldocs", 3, 2, 3, seed=4, page_size=(170, 220))
    out = tmp_path / "eval"
    assert (
        main(
            [
                "eval",
                "--model",
                str(grpo / "checkpoint-2" / "model"),
                "--tasks",
                f"docseeker:{data}",
                "--log_samples",
                "--output_path",
                str(out),
                "--gen_kwargs",
                "max_new_tokens=8,temperature=0",
                "--model_args",
                "max_pixels=12544",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    (results_file,) = list(out.rglob("*_results.json"))
    results = json.loads(results_file.read_text())
    text = json.dumps(results)
    for metric in (
        "accuracy",
        "evidence_precision",
        "evidence_recall",
        "evidence_f1",
        "accuracy_len_le10",
        "evidence_f1_len_gt30",
    ):
        assert f'"{metric}"' in text, metric
    (samples_file,) = list(out.rglob("*_samples_*.jsonl"))
    records = _rows(samples_file)
    assert len(records) == 3 and all("evidence_f1" in r["scores"] for r in records)
    assert all(r["scores"]["accuracy_len_gt30"] is None for r in records)  # 2-3 page docs: not in that bucket
