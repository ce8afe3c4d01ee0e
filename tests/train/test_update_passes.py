"""Every pass of the update (the policy's forward and backward, the old-policy pass, the reference pass)
encodes each group's prompt once and gives the LM head only rows that predict a completion token; the
mini-batch never builds G copies of the prompt's pixels."""

from __future__ import annotations

from pathlib import Path

from mmreason.config import load_config
from mmreason.rollout.forward import ModelBatch
from mmreason.train import step as grpo
from mmreason.train.config import TrainConfig
from mmreason.train.setup import setup_run

ROOT = Path(__file__).resolve().parents[2]
PROMPTS, G, ITERATIONS = 2, 3, 2


def test_policy_old_and_reference_passes_share_each_prompt(
    tiny_model_dir, shapes_cache, tmp_path, monkeypatch, one_torch_thread
):
    cfg = load_config(
        TrainConfig,
        ROOT / "configs/quickstart.yaml",
        [
            f"model.name_or_path={tiny_model_dir}",
            f"output_dir={tmp_path}/run",
            f"rollout.num_generations={G}",
            "rollout.max_completion_length=6",
            f"prompts_per_step={PROMPTS}",
            f"mini_batch_size={PROMPTS * G}",
            "algorithm.beta=0.04",
            f"algorithm.num_iterations={ITERATIONS}",
            "eval_steps=0",
            "num_threads=1",
            "rewards=[{name: anls, kwargs: {threshold: 0.0}}]",
        ],
    )
    run = setup_run(cfg, verbose=False)
    seen = {"policy": [0, 0], "reference": [0, 0]}  # [vision tower calls, LM head rows]
    real_update = grpo.policy_update
    completion_tokens = []

    def counted_update(run, scored):
        completion_tokens.append(sum(t.completion_length for t in scored.trajectories))
        hooks = []
        for name, model in (("policy", run.model), ("reference", run.ref_model)):
            hooks.append(
                model.model.visual.register_forward_hook(
                    lambda m, i, o, name=name: seen[name].__setitem__(0, seen[name][0] + 1)
                )
            )
            hooks.append(
                model.lm_head.register_forward_hook(
                    lambda m, i, o, name=name: seen[name].__setitem__(1, seen[name][1] + i[0].shape[:-1].numel())
                )
            )
        try:
            return real_update(run, scored)
        finally:
            for h in hooks:
                h.remove()

    monkeypatch.setattr(grpo, "policy_update", counted_update)
    built = []
    lazy = ModelBatch.visual
    monkeypatch.setattr(ModelBatch, "visual", property(lambda self: built.append(1) or lazy.fget(self)))
    run.step = 1
    metrics = grpo.train_step(run, 1)
    assert metrics.get("skipped_update", 0) == 0
    assert not built  # the batch's concatenated visual tensors are for a padded forward only
    # one mini-batch holds both groups: a plain padded pass would run the vision tower once for both
    assert seen["reference"][0] == PROMPTS
    assert seen["policy"][0] == PROMPTS * (1 + ITERATIONS)  # old-policy pass + one per iteration
    # per group: the prompt's last position, then one row per completion token after the first
    rows = completion_tokens[0] - PROMPTS * G + PROMPTS
    assert seen["reference"][1] == rows
    assert seen["policy"][1] == rows * (1 + ITERATIONS)
