"""FSDP2 by the trainer itself, on CPUs and GPUs alike, and gathering a sharded model's parameters to generate.

One code path: a launch with ``distributed_type: FSDP`` and ``fsdp_version: 2`` never goes through accelerate's
own FSDP preparation (which applies only on accelerators, so no CPU test could run it). The trainer builds its
Accelerator as plain data parallel (``plain_accelerator_env``) and shards the model itself with torch's
``fully_shard``, from the launcher's keys: each module whose class the config names
(``fsdp_transformer_layer_cls_to_wrap``: decoder layers and vision blocks; the model family's own when the
config names none or another family's, ``train/launch_checks.py``) is one FSDP unit, the root holds the
rest (embeddings, merger, head). ``accelerator.prepare`` then sees only the optimizer and scheduler. CI runs this
path on two CPU processes over gloo; a GPU runs the same functions over NCCL.

Precision (``sharding_dtypes``): the sharded parameters are the fp32 master weights whenever the run computes in
bf16 / fp16 (``model.dtype: bfloat16``, or accelerate's ``mixed_precision``), and FSDP2's ``MixedPrecisionPolicy``
casts each unit to the compute dtype when it is gathered, and reduces gradients in fp32 (as accelerate's FSDP2
preparation does). FSDP version 1 is refused at start-up.

Generation runs many forwards whose number differs between processes (early stops, uneven prompts, the
main process alone in the in-training eval), so it must not all-gather per forward: ``gathered(model)``,
entered by every process together, all-gathers every unit once and keeps them whole until the block ends.
Inside, the model runs without any collective.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from accelerate import Accelerator


def fsdp2_requested() -> bool:
    """Tell whether the launcher's config asked for FSDP version 2."""
    return (
        os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and os.environ.get("FSDP_VERSION", "1") == "2"
    )


def fsdp_requested() -> bool:
    """Tell whether the launcher's config asked for FSDP (any version)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def needs_own_sharding(accelerator: Accelerator) -> bool:
    """Tell whether FSDP2 was asked for: then the trainer shards the model itself, on every device (``shard_model``)."""
    return fsdp2_requested()


def ensure_process_group(device: torch.device) -> None:
    """Start a process group for ``fully_shard`` when the launcher started no collective (FSDP2 on one process): a world
    of one over gloo (CPU) or NCCL (CUDA), so that the sharded path is the multi-process one."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    # An in-memory store: a world of one needs no rendezvous, so no port can clash with another run's.
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)


@contextmanager
def plain_accelerator_env() -> Iterator[None]:
    """Make accelerate's environment say plain data parallel inside the block: the Accelerator built there never
    prepares FSDP itself (``shard_model`` does, the same on CPUs and GPUs). FSDP version 1 is refused."""
    if not fsdp_requested():
        yield
        return
    if not fsdp2_requested():
        raise ValueError(
            "fsdp_config.fsdp_version: 1 is not supported; set fsdp_version: 2 (configs/accelerate/fsdp.yaml)"
        )
    # transformers loads real weights on the main process alone under this flag, for accelerate's FSDP
    # preparation to broadcast them; the trainer's own sharding needs them loaded on every process.
    os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] = "false"
    saved = os.environ["ACCELERATE_USE_FSDP"]
    os.environ["ACCELERATE_USE_FSDP"] = "false"
    try:
        yield
    finally:
        os.environ["ACCELERATE_USE_FSDP"] = saved


def sharding_dtypes(model_dtype: torch.dtype, mixed_precision: str) -> tuple[torch.dtype, torch.dtype | None]:
    """Return (dtype of the sharded parameters, compute dtype or None): fp32 masters sharded and units cast to bf16 /
    fp16 when gathered, when the model is loaded in bf16 / fp16 or accelerate's ``mixed_precision`` asks; else the
    model's own dtype with no cast."""
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision)
    if model_dtype in (torch.bfloat16, torch.float16):
        return torch.float32, model_dtype
    if low is not None:
        return torch.float32, low
    return model_dtype, None


def wrap_classes() -> list[str]:
    """Read the class names of the FSDP units from the launcher's ``fsdp_transformer_layer_cls_to_wrap``."""
    names = os.environ.get("FSDP_TRANSFORMER_CLS_TO_WRAP", "")
    return [n.strip() for n in names.split(",") if n.strip()]


def shard_model(
    model: torch.nn.Module,
    classes: list[str],
    reshard_after_forward: bool | None = None,
    *,
    mixed_precision: str = "no",
    device: torch.device | str | None = None,
    frozen: bool = False,
) -> torch.nn.Module:
    """Apply ``fully_shard`` to every module whose class name is in ``classes``, then the root; return the model. A
    class name that matches no module is an error naming the classes the model has. The parameters are sharded in
    ``sharding_dtypes``' storage dtype (fp32 masters for a bf16 run) over every process, on ``device``'s kind (the
    accelerator's; CUDA takes each process's current device), each unit cast to the compute dtype when gathered;
    gradients are reduced in fp32.

    The units reshard after forward as the launcher says (``fsdp_reshard_after_forward``); the root keeps its
    parameters from its forward to its backward (FSDP2's own choice for a root: its backward starts at once
    with the LM head and ends with the embeddings, so resharding in between saves nothing and costs a second
    all-gather). ``frozen`` (the reference model, never trained): every parameter is sharded in its own dtype,
    no cast when gathered (it computes as the whole copy it replaces did), and every unit, the root too,
    reshards after each forward (no backward ever frees it)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if reshard_after_forward is None:
        reshard_after_forward = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"
    found = {type(m).__name__ for m in model.modules()}
    missing = [c for c in classes if c not in found]
    if missing:
        raise ValueError(
            f"fsdp_transformer_layer_cls_to_wrap: {', '.join(missing)} not in the model; its module "
            f"classes include {', '.join(sorted(n for n in found if 'Layer' in n or 'Block' in n))}"
        )
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    storage, compute = sharding_dtypes(next(model.parameters()).dtype, mixed_precision)
    if frozen:
        storage, compute, reshard_after_forward = next(model.parameters()).dtype, None, True
    kind = torch.device(device).type if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    mesh = init_device_mesh(kind, (dist.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32) if compute is not None else None
    options: dict[str, Any] = {
        "mesh": mesh,
        "reshard_after_forward": reshard_after_forward,
        **({"mp_policy": policy} if policy else {}),
    }
    # Unit by unit, each cast to the storage dtype just before fully_shard moves it to the mesh's device and
    # keeps this process's shard: no whole-model fp32 copy on the host or the device.
    for module in list(model.modules()):
        if type(module).__name__ in classes:
            _cast_unsharded(module, storage)
            fully_shard(module, **options)
    _cast_unsharded(model, storage)
    fully_shard(model, **{**options, "reshard_after_forward": frozen})
    return model


def _cast_unsharded(module: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast ``module``'s floating-point parameters that are not sharded yet to ``dtype`` (in place)."""
    for p in module.parameters():
        if not hasattr(p, "to_local") and p.is_floating_point() and p.dtype != dtype:
            p.data = p.data.to(dtype)


def is_sharded(model: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@contextmanager
def gathered(model: Any, *, whole: bool = True) -> Iterator[Any]:
    """Keep a sharded model's parameters whole inside the block; every process enters together. They are all-gathered
    once and stay whole until the block ends, so forwards inside (``generate``) need no collective and may differ in
    number between processes, or run on one process only. On exit every unit is resharded and gets back its own
    ``reshard_after_forward`` (the root's, the launcher's, or one set by hand). ``whole=False`` (the block runs no
    forward of this model, e.g. a vLLM engine generates) gathers nothing: the model stays sharded. Anything else is
    yielded as it is."""
    if not whole or not is_sharded(model):
        yield model
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    # The root's state must be set up before any unit runs on its own (generation may call the vision
    # tower directly); the root's first forward would do this, and there may have been none yet.
    model._get_fsdp_state()._lazy_init()
    own = [reshards_after_forward(unit) for unit in units]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
        unit.unshard()
    # transformers' generate() syncs every decoding step across processes for a module FSDP manages
    # (``synced_gpus``); with the parameters whole there is nothing to sync.
    managed = getattr(model, "_is_fsdp_managed_module", None)
    model._is_fsdp_managed_module = False
    try:
        yield model
    finally:
        model._is_fsdp_managed_module = managed
        for unit, reshard in zip(units, own):
            unit.reshard()
            unit.set_reshard_after_forward(reshard, recurse=False)


def reshards_after_forward(unit: Any) -> bool:
    """Tell whether FSDP2 unit ``unit`` frees its gathered parameters after each forward (its param group's post-forward
    mesh is set; torch has no public reader of it)."""
    groups = unit._get_fsdp_state()._fsdp_param_groups
    return any(g.post_forward_mesh_info is not None for g in groups)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """Gather the whole model's state dict on the main process's CPU (every process calls it; others get {}), or None
    for a model that is not sharded (its own ``state_dict`` is whole)."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return dict(state)  # type: ignore[arg-type]  # a model's entries are tensors


def load_full_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a whole state dict into a sharded model (every process calls it with the same dict)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, dict(state), options=StateDictOptions(full_state_dict=True, strict=True))


def full_optimizer_state(model: torch.nn.Module, optimizer: Any) -> dict[str, Any] | None:
    """Gather the optimizer's whole state (keyed by parameter names) on the main process's CPU, every process calling
    it; None for a model that is not sharded."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(
        model,
        getattr(optimizer, "optimizer", optimizer),
        options=StateDictOptions(full_state_dict=True, cpu_offload=True),
    )


def load_full_optimizer_state(model: torch.nn.Module, optimizer: Any, state: dict[str, Any]) -> None:
    """Load a whole optimizer state (``full_optimizer_state``) into a sharded model's optimizer."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(
        model, getattr(optimizer, "optimizer", optimizer), state, options=StateDictOptions(full_state_dict=True)
    )
