"""FSDP2 where accelerate does not apply it, and gathering a sharded model's parameters to generate.

accelerate 1.15 turns FSDP on only for accelerator devices: on the CPU (``Accelerator(cpu=True)``) a launch
with ``distributed_type: FSDP`` runs as multi-CPU DDP. When the launcher asked for FSDP2
(``ACCELERATE_USE_FSDP=true``, ``FSDP_VERSION=2``) and the accelerator is multi-CPU, the trainer shards the
model itself with torch's ``fully_shard``: each module whose class the config names
(``fsdp_transformer_layer_cls_to_wrap``: decoder layers and vision blocks; the model family's own when the
config names none or another family's, ``train/launch_checks.py``) is one FSDP unit, the root holds
the rest (embeddings, merger, head). ``accelerator.prepare`` then sees only the optimizer and scheduler.

Generation runs many forwards whose number differs between processes (early stops, uneven prompts, the
main process alone in the in-training eval), so it must not all-gather per forward: ``gathered(model)``,
entered by every process together, all-gathers every unit once and keeps them whole until the block ends.
Inside, the model runs without any collective.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch


def fsdp2_requested() -> bool:
    """Whether the launcher's config asked for FSDP version 2."""
    return (
        os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and os.environ.get("FSDP_VERSION", "1") == "2"
    )


def needs_own_sharding(accelerator) -> bool:
    """FSDP2 was asked for and accelerate did not apply it (the CPU: a multi-CPU accelerator)."""
    return fsdp2_requested() and accelerator.distributed_type.value == "MULTI_CPU"


def wrap_classes() -> list[str]:
    """Class names of the FSDP units, from the launcher's ``fsdp_transformer_layer_cls_to_wrap``."""
    names = os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "")
    return [n.strip() for n in names.split(",") if n.strip()]


def shard_model(model, classes: list[str], reshard_after_forward: bool | None = None):
    """``fully_shard`` every module whose class name is in ``classes``, then the root; returns the model.
    A class name that matches no module is an error naming the classes the model has."""
    from torch.distributed.fsdp import fully_shard

    if reshard_after_forward is None:
        reshard_after_forward = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"
    found = {type(m).__name__ for m in model.modules()}
    missing = [c for c in classes if c not in found]
    if missing:
        raise ValueError(
            f"fsdp_transformer_layer_cls_to_wrap: {', '.join(missing)} not in the model; its module "
            f"classes include {', '.join(sorted(n for n in found if 'Layer' in n or 'Block' in n))}"
        )
    for module in list(model.modules()):
        if type(module).__name__ in classes:
            fully_shard(module, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    return model


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@contextmanager
def gathered(model):
    """Every process enters together: a sharded model's parameters are all-gathered once and stay whole
    until the block ends, so forwards inside (``generate``) need no collective and may differ in number
    between processes, or run on one process only. Anything else is yielded as it is."""
    if not is_sharded(model):
        yield model
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    # The root's state must be set up before any unit runs on its own (generation may call the vision
    # tower directly); the root's first forward would do this, and there may have been none yet.
    model._get_fsdp_state()._lazy_init()
    for unit in units:
        unit.set_reshard_after_forward(False)
        unit.unshard()
    # transformers' generate() syncs every decoding step across processes for a module FSDP manages
    # (``synced_gpus``); with the parameters whole there is nothing to sync.
    managed = getattr(model, "_is_fsdp_managed_module", None)
    model._is_fsdp_managed_module = False
    try:
        yield model
    finally:
        model._is_fsdp_managed_module = managed
        reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(reshard)


def full_state_dict(model) -> dict[str, torch.Tensor] | None:
    """The whole model's state dict on the main process's CPU (every process calls it; others get {}),
    or None for a model that is not sharded (its own ``state_dict`` is whole)."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return dict(state)  # type: ignore[arg-type]  # a model's entries are tensors


def load_full_state_dict(model, state: dict[str, torch.Tensor]) -> None:
    """Load a whole state dict into a sharded model (every process calls it with the same dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, dict(state), options=StateDictOptions(full_state_dict=True, strict=True))


def full_optimizer_state(model, optimizer) -> dict | None:
    """The optimizer's whole state (keyed by parameter names) on the main process's CPU, every process
    calling it; None for a model that is not sharded."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(
        model,
        getattr(optimizer, "optimizer", optimizer),
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )


def load_full_optimizer_state(model, optimizer, state: dict) -> None:
    """Load a whole optimizer state (``full_optimizer_state``) into a sharded model's optimizer."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(
        model, getattr(optimizer, "optimizer", optimizer), state, options=StateDictOptions(full_state_dict=True)
    )
