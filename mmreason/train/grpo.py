"""`mmreason train CONFIG`: a GRPO-family run, the run loop (``loop.py``) around GRPO's step (``step.py``).

What only GRPO has: the start-up checks of the algorithm options, the estimator's columns and the group sizing,
and before each step the refresh of samplers scored from fresh rollouts (VAS ``mode: rollouts``).
"""

from __future__ import annotations

from typing import Any

from accelerate.utils import gather_object

from mmreason import rl
from mmreason.config import ConfigError
from mmreason.parallel.agree import settle
from mmreason.parallel.sharding import gathered
from mmreason.rewarding import REWARDS, reward_info
from mmreason.train.config import TrainConfig, check_algorithm_options
from mmreason.train.faults import RunStopped
from mmreason.train.loop import Method, run_loop
from mmreason.train.plot import plot_run
from mmreason.train.rollout_backend import check_backend_config
from mmreason.train.setup import Run, setup_run
from mmreason.train.step import draw_round, train_step
from mmreason.train.table import check_needs
from mmreason.train.timing import PhaseTimes


def train(cfg: TrainConfig, config_dir: str | None = None) -> Run:
    """Run the whole run; return the Run (for tests and notebooks). The run owns ``output_dir`` while it runs
    (``mmreason.rundir``: locked, and refused when it holds anything but a run to resume)."""
    check_algorithm_options(cfg, config_dir)
    check_backend_config(cfg)
    run = setup_run(cfg, config_dir=config_dir, own_output_dir=True)
    try:
        check_estimator_needs(run)
        check_group_sizing(run)
        run_loop(run, Method(grpo_step, cfg.max_steps, samples_policy=True))
    finally:
        run.release()
    if run.accelerator.is_main_process:
        print(f"curves: {plot_run(cfg.output_dir)}")
    return run


def grpo_step(run: Run, step: int) -> dict[str, Any]:
    """Refresh a sampler scored from fresh rollouts when due, then run the step (``step.train_step``)."""
    refresh_sampler(run, step)
    return train_step(run, step)


def check_estimator_needs(run: Run) -> None:
    """Check at start-up that every column the estimator declared comes from a configured reward or the samples."""
    name = run.cfg.algorithm.estimator
    needs = rl.needs_of(rl.ESTIMATORS.get(name))
    if not needs:
        return
    producers: dict[str, list[str]] = {}
    for reward_name in REWARDS.names():
        info = reward_info(REWARDS.get(reward_name))
        for key in info.keys if info else ():
            producers.setdefault(key, []).append(f"{reward_name} (its {key!r} sub-score)")
    sample = run.dataset[0] if run.dataset else None
    assert run.rewards is not None  # setup_run(with_rewards=True)
    check_needs("estimator", name, needs, run.rewards.announced_names, sample, producers=producers)


def check_group_sizing(run: Run) -> None:
    """Refuse at start-up a sampler that sizes the groups (Rollout-GDRO) without HF single-turn generation on one
    process."""
    if not run.sampler.sizes_groups:
        return
    cfg = run.cfg
    why = (
        "rollout.backend=vllm"
        if cfg.rollout.backend != "hf"
        else "episodes (rollout.max_turns > 1)"
        if run.pack.make_environment is not None and cfg.rollout.max_turns > 1
        else f"{run.accelerator.num_processes} processes"
        if run.accelerator.num_processes > 1
        else None
    )
    if why is not None:
        raise ConfigError(
            f"sampler.options.rollout_allocation: groups of different sizes are generated with HF "
            f"single-turn generation on one process; this run has {why}"
        )


def refresh_sampler(run: Run, step: int) -> None:
    """Refresh samplers scored from fresh rollouts (VAS ``mode: rollouts``): roll out their prompts, hand back
    ``{dataset index: (rewards, completions)}``. Prompts are split over processes and gathered."""
    if not run.sampler.refresh_due(step):
        return
    acc, n = run.accelerator, max(run.cfg.prompts_per_step, 1)
    mine = run.sampler.refresh_indices()[acc.process_index :: acc.num_processes]
    scores: dict[int, tuple[list[float], list[str]]] = {}
    with gathered(acc.unwrap_model(run.model)):
        for start in range(0, len(mine), n):
            got = draw_round(run, step, PhaseTimes(), list(enumerate(mine[start : start + n])))
            index_of = {d.slot: d.index for d in got.prompts}
            for t, reward in zip(got.trajectories, got.batch.total(run.cfg.reward_missing).tolist()):
                rewards, texts = scores.setdefault(index_of[t.group_id], ([], []))
                rewards.append(reward)
                texts.append(t.completion_text)
    settle(run, RunStopped)
    if acc.num_processes > 1:
        merged: dict[int, tuple[list[float], list[str]]] = {}
        for part in gather_object([scores]):
            merged.update(part)
        scores = merged
    run.sampler.refresh(scores)
