"""Every policy loss runs with its inputs on an accelerator and creates no tensor on the CPU beside them.

The CPU stands in for the GPU with ``OnDevice``: a CPU tensor that reports the ``meta`` device. Under
``other_device()`` every operation unwraps it, runs on the real values (so ``.item()``, ``unique`` and
boolean indexing work, as on CUDA; a plain ``meta`` tensor has no values and refuses them) and wraps the
result back, and an operation that meets a plain CPU tensor (more than a scalar) beside it raises, as CUDA
does. A factory call with ``device=x.device`` makes an ``OnDevice`` tensor; one without makes a CPU tensor.

Two placements per loss and option set: every input on the device, and the trainer's (``train/update.py``:
the group ids, the rows' and the step's rewards and the entropy history built on the CPU).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from mmreason.rl import POLICY_LOSSES, policy_loss
from tests.rl.losses.test_degenerate import VARIANTS, case, inputs

CPU_SIDE = ("group_ids", "rewards", "step_rewards", "entropy_history")  # what update.py builds on the CPU


class OnDevice(torch.Tensor):
    """A CPU tensor that reports the ``meta`` device: a tensor on the accelerator, with values."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, requires_grad: bool = False):
        return torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), dtype=elem.dtype, device="meta", requires_grad=requires_grad
        )

    def __init__(self, elem: torch.Tensor, requires_grad: bool = False):
        self.elem = elem

    def tolist(self):  # torch refuses tolist() on a subclass; CUDA tensors have it
        return self.elem.tolist()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("OnDevice tensors are used inside other_device()")


class StrayCPUTensor(RuntimeError):
    pass


class _DeviceFactories(TorchFunctionMode):
    """``torch.tensor(data, device=x.device)`` / ``torch.as_tensor``: made in C++ without a dispatched call,
    so they are caught here and made as ``OnDevice`` tensors with their values."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if func in (torch.tensor, torch.as_tensor) and device is not None and torch.device(device).type == "meta":
            return OnDevice(func(*args, **{**kwargs, "device": "cpu"}))
        return func(*args, **kwargs)


class _DeviceOps(TorchDispatchMode):
    """Runs ``OnDevice`` operations on their values; raises where a CPU tensor meets one."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        there = any(isinstance(t, OnDevice) for t in tensors)
        stray = [t for t in tensors if not isinstance(t, OnDevice) and t.dim() > 0]
        if there and stray:
            raise StrayCPUTensor(f"{func}: a CPU tensor of shape {tuple(stray[0].shape)} beside device tensors")
        device = kwargs.get("device")
        to_device = device is not None and torch.device(device).type == "meta"
        if to_device:
            kwargs = {**kwargs, "device": torch.device("cpu")}
        args, kwargs = tree_map(lambda t: t.elem if isinstance(t, OnDevice) else t, (args, kwargs))
        out = func(*args, **kwargs)
        if to_device or (there and device is None):
            return tree_map(lambda t: OnDevice(t) if isinstance(t, torch.Tensor) else t, out)
        return out


@contextmanager
def other_device():
    """Inside: ``OnDevice`` tensors compute on their values, and a CPU tensor beside one raises."""
    with _DeviceFactories(), _DeviceOps():
        yield


def run_loss(name: str, options: dict, cpu_side: tuple[str, ...]):
    """(loss, d loss / d logprobs) of ``name`` with its inputs on the device except the ``cpu_side`` fields."""
    lp, old, adv, mask, groups, _ = case("empty_rows")
    keywords = {"group_ids": groups, "ref_logprobs": old, "beta": 0.05} | inputs(name, lp, old) | options
    with other_device():

        def place(key, value):
            return OnDevice(value) if isinstance(value, torch.Tensor) and key not in cpu_side else value

        logprobs = OnDevice(lp, requires_grad=True)
        placed = {k: place(k, v) for k, v in keywords.items()}
        out = policy_loss(name, logprobs, OnDevice(old), OnDevice(adv), OnDevice(mask), **placed)
        (grad,) = torch.autograd.grad(out.loss, logprobs)
    return out.loss, grad


def test_the_stand_in_catches_a_stray_cpu_tensor():
    with other_device():
        x = OnDevice(torch.ones(3))
        assert isinstance(x + torch.zeros(3, device=x.device), OnDevice)
        assert float((x * torch.tensor(2.0)).sum()) == 6.0  # a CPU scalar is fine, as on CUDA
        assert (x + torch.tensor([1.0, 2.0, 3.0], device=x.device)).tolist() == [2.0, 3.0, 4.0]
        with pytest.raises(StrayCPUTensor):
            x + torch.zeros(3)


@pytest.mark.parametrize("placement", ["all_on_device", "trainer"])
@pytest.mark.parametrize("variant", ["default", "variant"])
@pytest.mark.parametrize("name", sorted(POLICY_LOSSES.names()))
def test_loss_inputs_on_one_device(name, variant, placement):
    options = {} if variant == "default" else VARIANTS[name]
    loss, grad = run_loss(name, options, CPU_SIDE if placement == "trainer" else ())
    assert isinstance(loss, OnDevice) and isinstance(grad, OnDevice)
    # the stand-in computes what the CPU computes
    lp, old, adv, mask, groups, _ = case("empty_rows")
    lp.requires_grad_()
    keywords = {"group_ids": groups, "ref_logprobs": old, "beta": 0.05} | inputs(name, lp, old) | options
    want = policy_loss(name, lp, old, adv, mask, **keywords)
    (want_grad,) = torch.autograd.grad(want.loss, lp)
    torch.testing.assert_close(loss.elem, want.loss.detach())
    torch.testing.assert_close(grad.elem, want_grad)
