"""A new user's environment file trains on the generic pack from the docs alone: the zoom example
(examples/environments/zoom.py) with its two tiny recipes, through the real CLI. A short SFT on its rows'
zoom-then-answer trajectories (one fixed box, so the tiny model learns the call in a few steps) gives a model that
calls the tool; one GRPO step then plays episodes in which the crop enters the next turn (``env/tool_images``), and
two more steps do so with the episodes generated asynchronously, up to two steps ahead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmreason.cli import main

ROOT = Path(__file__).resolve().parents[2]
BOX = [0.2, 0.2, 0.8, 0.8]
ZOOM = "examples/environments/zoom.py:ZoomEnvironment"


def _rows(out: Path) -> Path:
    """The example's own rows (``zoom.py data``), every trajectory zooming into one box."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoom_example", ROOT / "examples" / "environments" / "zoom.py")
    zoom = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoom)
    zoom.write_rows(out, n_train=1, n_eval=1)
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    call = json.dumps({"name": "zoom", "arguments": {"box": BOX}})
    for r in rows:
        r["process"] = f"Zoom.</think>\n<tool_call>\n{call}\n</tool_call>\n<think>"
    (out / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out / "train.jsonl"


def _calls_the_tool(tiny_model_dir, data: Path, out: Path) -> Path:
    """The tiny model taught to write the zoom call after each of the rows' prompts (60 Adam steps on the call's
    tokens, through the trainer's own forward): a random tiny model writes no call, so no crop would be shown."""
    import torch

    from mmreason.models import ModelConfig, load_model, load_processor
    from mmreason.rollout.env_plugin import attach_environment, load_environment
    from mmreason.rollout.forward import collate, token_logprobs
    from mmreason.rollout.prompts import build_prompt
    from mmreason.taskpack import TASKS
    from mmreason.types import Trajectory

    processor = load_processor(tiny_model_dir, 3136, 12544)
    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"))
    pack = attach_environment(TASKS.get("generic"), load_environment(ZOOM, base_dir=str(ROOT)))
    call = json.dumps({"name": "zoom", "arguments": {"box": BOX}})
    target = processor.tokenizer(f"<tool_call>\n{call}\n</tool_call>", return_tensors="pt")["input_ids"][0]
    rows = []
    for k, sample in enumerate(pack.load(str(data), "train", prompt_template="think_answer")):
        p = build_prompt(
            processor,
            pack.prepare(sample, split="train", seed=0, step=0),
            max_prompt_length=768,
            min_pixels=3136,
            max_pixels=12544,
        )
        ids = torch.cat([p.input_ids, target])
        mask = torch.cat([torch.zeros_like(p.input_ids), torch.ones_like(target)])
        types = torch.cat([p.mm_token_type_ids, torch.zeros_like(target)])
        rows.append(Trajectory(sample.id, k, ids, mask, p.length, "", mm_token_type_ids=types, visual=[p.visual]))
    batch = collate(rows, processor.tokenizer.pad_token_id)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(60):
        logp, _ = token_logprobs(model, batch)
        loss = -(logp * batch.action_mask).sum() / batch.action_mask.sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    assert float(loss.detach()) < 0.3, float(loss.detach())
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


@pytest.mark.slow
def test_the_zoom_example_trains_on_the_generic_pack_with_its_crops_in_the_next_turn(
    tiny_model_dir, tmp_path, monkeypatch, one_torch_thread
):
    monkeypatch.chdir(ROOT)  # the recipes name the example by its path from the repository root, as the docs run them
    data = _rows(tmp_path / "data")
    common = [f"data.train_path={data}", "log_completions_steps=0", "num_threads=1"]
    # the SFT recipe: zoom-then-answer trajectories replayed through the environment (the crop between the turns)
    assert (
        main(
            [
                "sft",
                "configs/generic/zoom_sft_tiny.yaml",
                f"model.name_or_path={tiny_model_dir}",
                f"output_dir={tmp_path / 'sft'}",
                "max_steps=1",
                "prompts_per_step=2",
                *common,
            ]
        )
        == 0
    )
    model = _calls_the_tool(tiny_model_dir, data, tmp_path / "calls")
    run = tmp_path / "grpo"
    assert (
        main(
            [
                "train",
                "configs/generic/zoom_grpo_tiny.yaml",
                f"model.name_or_path={model}",
                f"output_dir={run}",
                "max_steps=1",
                "prompts_per_step=1",
                "rollout.num_generations=2",
                "rollout.temperature=0.1",  # near-greedy: the call the model was taught
                "mini_batch_size=2",
                f"data.eval_path={data.parent / 'eval.jsonl'}",  # in-training eval: episodes in the same environment
                "eval_steps=1",
                "eval_limit=1",
                *common,
            ]
        )
        == 0
    )
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["env/tool_calls"] > 0 and row["env/episodes_with_call"] > 0, row
    assert row["env/tool_images"] > 0  # the crop was shown in the next turn
    assert row["count/env_faults"] == 0 and "count/bad_tool_calls" in row
    evals = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "eval" in line]
    assert any(r.get("eval/generic:eval/n_failed") == 0 for r in evals), evals  # its episodes ran, none failed
    # the same recipe with episodes generated two steps ahead (asynchronous, HF policy copy): crops still shown
    late = tmp_path / "grpo-async"
    argv = ["train", "configs/generic/zoom_grpo_tiny.yaml", f"model.name_or_path={model}", f"output_dir={late}"]
    argv += ["max_steps=2", "prompts_per_step=1", "rollout.num_generations=2", "rollout.temperature=0.1"]
    argv += ["mini_batch_size=2", "rollout.async_generation=true", "rollout.max_staleness=2", *common]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (late / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "env/tool_images" in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["env/tool_images"] > 0 for r in steps), steps
    assert all(r["count/env_faults"] == 0 and "async/staleness_mean" in r for r in steps), steps
