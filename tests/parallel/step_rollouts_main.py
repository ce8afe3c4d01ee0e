"""Writes one training step's rollouts, gathered from every process, as JSON: ``{group key: [[token ids,
text], ...]}``. tests/parallel/test_rollouts_across_processes.py runs it under ``accelerate launch`` with 2
processes (arguments: the output file, then config overrides) and calls ``main`` in its own process;
tests/rollout_vllm/test_vllm_server.py does the same with the vLLM backend in server mode (every process a
client of one server), tests/rollout_vllm/test_vllm_colocate_processes.py in colocate mode (an engine a
process)."""

from __future__ import annotations

import json
import sys


def main(out: str, overrides: list[str]) -> None:
    from accelerate.utils import gather_object

    from mmreason.config import load_config
    from mmreason.parallel.shutdown import finish_processes
    from mmreason.train.config import TrainConfig
    from mmreason.train.prompts import build_prompts
    from mmreason.train.rollout_backend import close_backend, make_backend, push_at_start, sync_weights
    from mmreason.train.setup import setup_run
    from mmreason.train.step import roll_out, sample_prompts

    run = setup_run(load_config(TrainConfig, None, overrides), with_rewards=False, verbose=False)
    run.rollout_backend = make_backend(run)  # None for rollout.backend=hf
    if push_at_start(run.cfg, resumed=False) or run.rollout_backend is not None:
        # a vLLM server starts from the run's weights; colocated engines (one a process) take them too, as after
        # an update (the same weights: the rows do not change)
        sync_weights(run, after_update=False)
    run.step = 1
    drawn = build_prompts(run, sample_prompts(run))
    trajectories = roll_out(run, drawn, 1)
    key_of = {d.slot: d.key for d in drawn}
    mine: dict[str, list] = {}
    for t in trajectories:
        mine.setdefault(key_of[t.group_id], []).append([t.token_ids.tolist(), t.completion_text])
    merged: dict[str, list] = {}
    for part in gather_object([mine]):
        merged.update(part)
    if run.accelerator.is_main_process:
        with open(out, "w") as f:
            json.dump({"processes": run.accelerator.num_processes, "groups": merged}, f)
    close_backend(run)
    finish_processes(run.accelerator)  # end as a run ends: both ranks meet, then the process group goes


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
