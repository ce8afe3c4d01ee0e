"""`mmreason sft CONFIG`: supervised fine-tuning on the same data, model, logging and checkpoints.

Each sample becomes prompt + target (the pack's ``target_text``, e.g. an ALR trace or a thought-dropped
answer) + the chat template's turn end (``<|im_end|>`` for Qwen); the loss is the mean negative
log-likelihood of the assistant tokens only. The run around the steps (resume, checkpoints, stops) is the
same loop as GRPO's (``loop.py``).
"""

from __future__ import annotations

import argparse
import time

import torch

from mmreason.config import load_config
from mmreason.parallel.agree import any_rank, equal_minibatches, settle
from mmreason.parallel.shutdown import finish_processes
from mmreason.rollout.chat_turns import turn_end
from mmreason.rollout.forward import ModelBatch, collate, token_logprobs
from mmreason.rollout.prompts import PromptInputs
from mmreason.rollout.replay import replay_episode
from mmreason.train.config import TrainConfig
from mmreason.train.faults import RunStopped, bad_sample, nothing_usable
from mmreason.train.loop import Method, run_loop
from mmreason.train.optimizer_step import optimizer_step
from mmreason.train.prompts import load_prompt
from mmreason.train.setup import Run, setup_run
from mmreason.train.vision_calls import match_vision_calls
from mmreason.types import Trajectory


def sft_example(run: Run, index: int) -> Trajectory | None:
    """Build prompt + target tokens with action_mask on the target; None (counted) for a broken sample."""
    prompt = load_prompt(run, index, split="sft")
    if prompt is None:
        return None
    if run.pack.make_environment is not None and run.cfg.rollout.max_turns > 1:
        return replayed_example(run, prompt, index)  # a tool trajectory, its observations real
    try:
        text = run.pack.target_text(prompt.sample) + turn_end(run.processor).strip()  # the model learns to stop
        target = run.processor.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
    # a target the pack cannot write (a bad answer value): counted
    except Exception as exc:  # noqa: BLE001
        bad_sample(run, prompt.sample.id, exc)
        return None
    target = target[: run.cfg.rollout.max_completion_length]
    ids = torch.cat([prompt.input_ids, target])
    mask = torch.zeros_like(ids)
    mask[prompt.length :] = 1
    return Trajectory(
        prompt.sample.id,
        index,
        ids,
        mask,
        prompt.length,
        text,
        mm_token_type_ids=torch.cat([prompt.mm_token_type_ids, torch.zeros_like(target)]),
        visual=[prompt.visual] if prompt.visual else [],
    )


def replayed_example(run: Run, prompt: PromptInputs, index: int) -> Trajectory | None:
    """Replay a multi-turn target (a tool trajectory) through the pack's environment, its real observations between the
    turns (``mmreason.rollout.replay``); a target the environment refuses is a counted bad sample."""
    make_environment = run.pack.make_environment
    assert make_environment is not None  # only an episodic pack replays its targets
    try:
        return replay_episode(
            run.processor,
            prompt,
            make_environment(),
            run.pack.target_text(prompt.sample),
            turn_end(run.processor).strip(),
            index=index,
            image_budget=(run.cfg.data.min_pixels, run.cfg.data.max_pixels),
        )
    # any one sample's failure is its counted skip
    except Exception as exc:  # noqa: BLE001
        bad_sample(run, prompt.sample.id, exc)
        return None


def sft_minibatches(run: Run, examples: list[Trajectory]) -> list[tuple[ModelBatch, float]]:
    """Cut the step's examples into (collated mini-batch, weight) pairs, as many on every process and each with the same
    vision calls, so no process waits in a collective the others skip. A process with fewer mini-batches repeats one
    with weight 0 (``agree.equal_minibatches``, ``vision_calls.match_vision_calls``)."""
    size = run.cfg.mini_batch_size
    rows = list(range(len(examples)))
    chunks = [rows[i : i + size] for i in range(0, len(rows), size)]
    _, (chunks,), (weights,) = equal_minibatches(run.accelerator, [rows], [chunks], 1)
    pad = run.processor.tokenizer.pad_token_id
    members = [[examples[i] for i in chunk] for chunk in chunks]
    batches = match_vision_calls(run, [(m, collate(m, pad).to(run.device)) for m in members])
    return list(zip(batches, weights))


def sft_step(run: Run, step: int) -> dict[str, float]:
    """Run one step: the step's examples (past ``max_bad_samples`` broken ones, every process stops together),
    token-mean NLL of their targets over mini-batches, one optimizer step (skipped when not finite)."""
    t0 = time.perf_counter()
    n, acc = run.cfg.prompts_per_step, run.accelerator
    indices = run.sampler.next_indices(n * acc.num_processes)[acc.process_index * n : (acc.process_index + 1) * n]
    examples = [e for e in (sft_example(run, i) for i in indices) if e is not None]
    settle(run, RunStopped)
    # no process has an example: stop rather than train on nothing
    if not any_rank(acc, bool(examples)):
        raise nothing_usable(run, step)
    if any_rank(acc, not examples):  # every process skips when one has nothing to train on
        return {"skipped_update": 1.0}
    total_tokens = sum(e.completion_length for e in examples)
    losses = []
    for batch, weight in sft_minibatches(run, examples):
        with run.accelerator.autocast():  # the head in the run's precision too (rl.lm_head)
            logp, _ = token_logprobs(run.model, batch)
        loss = -(logp * batch.action_mask).sum() / total_tokens * weight  # token mean over the whole step
        run.accelerator.backward(loss)
        losses.append(float(loss.detach()))
    grad_norm = optimizer_step(run)  # every process skips together on a non-finite gradient
    counts = {f"count/{k}": v for k, v in run.counters.as_dict().items()}
    if grad_norm is None:
        return {"loss": float("nan"), "skipped_update": 1.0, **counts}
    return {
        "loss": sum(losses),
        "grad_norm": grad_norm,
        "tokens": float(total_tokens),
        "lr": run.scheduler.get_last_lr()[0],
        "time/step": time.perf_counter() - t0,
        **counts,
    }


def sft(cfg: TrainConfig) -> Run:
    """Run the whole SFT run; it owns ``output_dir`` while it runs (``mmreason.rundir``)."""
    run = setup_run(cfg, with_rewards=False, own_output_dir=True)
    try:
        steps_per_epoch = -(-len(run.dataset) // (cfg.prompts_per_step * run.accelerator.num_processes))
        total = cfg.max_steps if cfg.max_steps > 0 else steps_per_epoch * cfg.sft_epochs
        return run_loop(run, Method(sft_step, total))
    finally:
        run.release()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a YAML recipe, e.g. configs/vision/ton_sft.yaml")
    parser.add_argument("overrides", nargs="*", metavar="key=value")


def run(args: argparse.Namespace) -> int:
    finished = sft(load_config(TrainConfig, args.config, args.overrides))
    finish_processes(finished.accelerator)  # every rank ends in order and exits 0
    return 0
