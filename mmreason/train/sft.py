"""`mmreason sft CONFIG`: supervised fine-tuning on the same data, model, logging and checkpoints.

Each sample becomes prompt + target (the pack's ``target_text``, e.g. an ALR trace or a thought-dropped
answer) + the chat template's turn end (``<|im_end|>`` for Qwen); the loss is the mean negative
log-likelihood of the assistant tokens only.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from mmreason.config import load_config
from mmreason.rollout.chat_turns import turn_end
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.train.checkpoint import resume, save_checkpoint
from mmreason.train.config import TrainConfig
from mmreason.train.faults import RunStopped
from mmreason.train.logging import RunLogger
from mmreason.train.prompts import load_prompt
from mmreason.train.setup import Run, setup_run
from mmreason.train.update import gradients_finite
from mmreason.types import Trajectory


def sft_example(run: Run, index: int) -> Trajectory | None:
    """Prompt + target tokens with action_mask on the target; None (counted) for a broken sample."""
    prompt = load_prompt(run, index, split="sft")
    if prompt is None:
        return None
    if run.pack.make_environment is not None and run.cfg.rollout.max_turns > 1:
        return replayed_example(run, prompt, index)  # a tool trajectory, its observations real
    text = run.pack.target_text(prompt.sample) + turn_end(run.processor).strip()  # the model learns to stop
    target = run.processor.tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]
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


def replayed_example(run: Run, prompt, index: int) -> Trajectory | None:
    """A multi-turn target (a tool trajectory) replayed through the pack's environment, its real observations
    between the turns (``mmreason.rollout.replay``); a target the environment refuses is a counted bad sample."""
    from mmreason.rollout.replay import replay_episode

    try:
        return replay_episode(
            run.processor,
            prompt,
            run.pack.make_environment(),
            run.pack.target_text(prompt.sample),
            turn_end(run.processor).strip(),
            index,
        )
    except (ValueError, OSError) as exc:
        run.counters.bad_samples += 1
        run.event("bad_sample", sample_id=prompt.sample.id, reason=str(exc))
        if run.counters.bad_samples > run.cfg.max_bad_samples:
            raise RunStopped(
                f"{run.counters.bad_samples} broken samples (max_bad_samples="
                f"{run.cfg.max_bad_samples}); last: {prompt.sample.id!r}: {exc}"
            ) from exc
        return None


def sft_step(run: Run) -> dict[str, float]:
    t0 = time.perf_counter()
    n, acc = run.cfg.prompts_per_step, run.accelerator
    indices = run.sampler.next_indices(n * acc.num_processes)[acc.process_index * n : (acc.process_index + 1) * n]
    examples = [e for e in (sft_example(run, i) for i in indices) if e is not None]
    if not examples:
        return {"skipped_update": 1.0}
    pad = run.processor.tokenizer.pad_token_id
    total_tokens = sum(e.completion_length for e in examples)
    losses = []
    for i in range(0, len(examples), run.cfg.mini_batch_size):
        batch = collate(examples[i : i + run.cfg.mini_batch_size], pad).to(run.device)
        logp, _ = token_logprobs(run.model, batch)
        loss = -(logp * batch.action_mask).sum() / total_tokens  # token mean over the whole step
        run.accelerator.backward(loss)
        losses.append(float(loss.detach()))
    grad_norm = run.accelerator.clip_grad_norm_(run.model.parameters(), run.cfg.max_grad_norm)
    if not (torch.isfinite(torch.as_tensor(grad_norm)) and gradients_finite(run.model.parameters())):  # after clipping
        run.counters.nan_steps += 1
        run.optimizer.zero_grad(set_to_none=True)
        return {"loss": float("nan"), "skipped_update": 1.0}
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    return {
        "loss": sum(losses),
        "grad_norm": float(grad_norm),
        "tokens": float(total_tokens),
        "lr": run.scheduler.get_last_lr()[0],
        "time/step": time.perf_counter() - t0,
        **{f"count/{k}": v for k, v in run.counters.as_dict().items()},
    }


def sft(cfg: TrainConfig) -> Run:
    """The whole SFT run; it owns ``output_dir`` while it runs (``mmreason.rundir``)."""
    run = setup_run(cfg, with_rewards=False, own_output_dir=True)
    try:
        return _sft(run, cfg)
    finally:
        run.release()


def _sft(run: Run, cfg: TrainConfig) -> Run:
    steps_per_epoch = -(-len(run.dataset) // (cfg.prompts_per_step * run.accelerator.num_processes))
    total = cfg.max_steps if cfg.max_steps > 0 else steps_per_epoch * cfg.sft_epochs
    start = 0
    resumed = resume(
        cfg.resume,
        cfg.output_dir,
        run.accelerator,
        run.model,
        run.optimizer,
        run.scheduler,
        check_state=lambda state: copy.deepcopy(run.sampler).load_state_dict(state["sampler"]),
    )
    if resumed is not None:
        _, state = resumed
        run.adopt(state)
        run.sampler.load_state_dict(state["sampler"])
        start = int(state["step"])
    run.logger = RunLogger(cfg.output_dir, run.accelerator, total, start, cfg.report_to)
    state = lambda: {"sampler": run.sampler.state_dict(), "counters": run.counters.as_dict()}  # noqa: E731
    before = state()
    try:
        for step in range(start + 1, total + 1):
            run.step = step
            before = copy.deepcopy(state())  # a fault in this step saves step - 1 with this
            run.logger.step(step, sft_step(run))
            if cfg.save_steps and step % cfg.save_steps == 0:
                save_checkpoint(
                    run.accelerator,
                    cfg.output_dir,
                    step,
                    run.model,
                    run.optimizer,
                    run.scheduler,
                    state(),
                    processor=run.processor,
                    keep=cfg.save_total_limit,
                    run_id=run.run_id,
                )
        if not cfg.save_steps or total % cfg.save_steps:
            save_checkpoint(
                run.accelerator,
                cfg.output_dir,
                total,
                run.model,
                run.optimizer,
                run.scheduler,
                state(),
                processor=run.processor,
                keep=cfg.save_total_limit,
                run_id=run.run_id,
            )
    except RunStopped:  # before the step's update: the weights are those after step - 1
        save_checkpoint(
            run.accelerator,
            cfg.output_dir,
            run.step - 1,
            run.model,
            run.optimizer,
            run.scheduler,
            before,
            processor=run.processor,
            keep=cfg.save_total_limit,
            run_id=run.run_id,
        )
        raise
    finally:
        run.logger.close()
    return run


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a YAML recipe, e.g. configs/vision/ton_sft.yaml")
    parser.add_argument("overrides", nargs="*", metavar="key=value")


def run(args: argparse.Namespace) -> int:
    from mmreason.parallel.shutdown import finish_processes

    finished = sft(load_config(TrainConfig, args.config, args.overrides))
    finish_processes(finished.accelerator)  # every rank ends in order and exits 0
    return 0
