"""The in-training hook: the trainer's call returns the harness's numbers for the task's eval split."""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace

from mmreason.eval.in_training import evaluate_during_training, training_options
from mmreason.eval.scoring import score_task
from mmreason.eval.tasks import load_task
from mmreason.taskpack import TASKS
from mmreason.train.config import TrainConfig


def test_eval_during_training_matches_the_harness(tiny, tiny_model_dir, shapes_cache, tmp_path):
    from accelerate import Accelerator

    model, processor = tiny
    cfg = TrainConfig(output_dir=str(tmp_path), eval_steps=5, eval_limit=5)
    cfg.model.name_or_path = str(tiny_model_dir)
    cfg.rollout.max_completion_length = 6
    cfg.rollout.num_generations = 2
    run = SimpleNamespace(
        cfg=cfg, accelerator=Accelerator(cpu=True), model=model, processor=processor, pack=TASKS.get("shapes")
    )
    model.train()  # as inside the training loop
    try:
        metrics = evaluate_during_training(run, step=5)
        assert model.training  # handed back in training mode
    finally:
        model.eval()
    assert set(metrics) == {"eval/shapes/accuracy", "eval/shapes/n_failed"}
    rows = [json.loads(line) for line in (tmp_path / "eval" / "step-5_samples_shapes.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(r["completion_tokens"] <= 6 for r in rows)
    assert metrics["eval/shapes/accuracy"] == statistics.fmean(r["scores"]["accuracy"] for r in rows)
    assert metrics["eval/shapes/n_failed"] == 0.0
    # The same numbers as the harness on the same docs with the same (greedy) settings.
    harness = score_task(model, processor, load_task("shapes", None, 5), training_options(cfg))
    assert [r["response"] for r in harness] == [r["response"] for r in rows]
    assert training_options(cfg).settings.temperature == 0.0


def test_trainer_logs_eval_metrics_that_match_the_saved_lora_checkpoint(
    run_eval, tiny_model_dir, shapes_cache, tmp_path
):
    from mmreason.config import load_config
    from mmreason.train.grpo import train

    run_dir = tmp_path / "run"
    cfg = load_config(
        TrainConfig,
        None,
        [
            f"model.name_or_path={tiny_model_dir}",
            "model.lora=true",
            f"output_dir={run_dir}",
            "max_steps=2",
            "eval_steps=2",
            "eval_limit=3",
            "prompts_per_step=2",
            "rollout.num_generations=2",
            "rollout.max_completion_length=5",
            "learning_rate=0.05",
            "save_steps=2",
            "num_threads=1",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        ],
    )  # a reward that varies on the random model's output
    train(cfg)
    logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Before step 1 (where the curve starts), then every eval_steps steps.
    assert [(row["step"], "eval/shapes/accuracy" in row) for row in logged] == [(0, True), (1, False), (2, True)]
    during = [json.loads(line) for line in (run_dir / "eval" / "step-2_samples_shapes.jsonl").read_text().splitlines()]
    # The run directory (a LoRA adapter at checkpoint-2) evaluated afterwards gives the same completions.
    after = run_eval(
        "--model",
        str(run_dir),
        "--tasks",
        "shapes",
        "--limit",
        "3",
        "--batch_size",
        "2",
        "--gen_kwargs",
        "max_new_tokens=5",
        "--output_path",
        str(tmp_path / "eval"),
        "--log_samples",
    )
    assert "checkpoint-2" in after.results_path.parent.name
    assert after.results["config"]["model"]["adapter"].endswith("checkpoint-2/model")
    rows = [json.loads(line) for line in after.samples_paths["shapes"].read_text().splitlines()]
    assert [r["response"] for r in rows] == [r["response"] for r in during]
    assert logged[2]["eval/shapes/accuracy"] == after.results["results"]["shapes"]["accuracy,none"]
