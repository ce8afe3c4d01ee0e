"""The process-wide side of a vLLM engine built *in* the training process (colocate mode, vLLM's
``external_launcher``; docs/vllm.md, "The colocated engine"): the launcher variables it reads while it is
built, vLLM's distributed state that every such engine of a process shares (its groups, cut from the
trainer's ``torch.distributed`` world when there is one), and the weights file streamed to its worker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@contextmanager
def launcher_env(env: dict[str, str]) -> Iterator[None]:
    """Set ``env`` in this process's environment for the block, then put back as it was (a process started without a
    launcher keeps no launcher variables, which would tell a later ``Accelerator`` it is one)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def file_tensors(path: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (name, tensor) of a safetensors file, one at a time."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        for name in f.keys():
            yield name, f.get_tensor(name)


IN_PROCESS: list[object] = []  # the in-process (colocated) engines alive in this process


@contextmanager
def sharing_distributed_state(*, others: bool, keep_world: bool) -> Iterator[None]:
    """Spare shared distributed state while an in-process engine shuts down: vLLM's cleanup of its process-wide state
    (its groups, then the default process group) is skipped while ``others``, other in-process engines of this
    process, still use that state, and only the default group's destruction is skipped when that group is the
    trainer's (``keep_world``)."""
    import torch.distributed as dist

    saved: list[tuple[object, str, object]] = []
    if others:
        import vllm.v1.engine.core as core  # where the engine core's shutdown finds its cleanup

        saved.append((core, "cleanup_dist_env_and_memory", core.cleanup_dist_env_and_memory))
        core.cleanup_dist_env_and_memory = lambda *args, **kwargs: None
    elif keep_world:
        destroy = dist.destroy_process_group
        saved.append((dist, "destroy_process_group", destroy))
        dist.destroy_process_group = lambda group=None: destroy(group) if group is not None else None
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
