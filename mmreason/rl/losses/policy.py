"""The two call forms of a policy loss.

A registered loss is ``fn(x: LossInputs, **options)``. ``tensor_form(fn)`` makes the keyword form
``fn(logprobs, old_logprobs, advantages, mask, **keywords)`` of it once, for every loss alike: the keywords that
are LossInputs fields build the record, the rest are the loss's options. ``policy_loss(name, ...)`` calls a
registered loss in that form; ``call_loss`` is how the trainer calls one with the record it built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from torch import Tensor

from mmreason.rl.loss_inputs import TENSORS, LossInputs, contract_of, missing_needs
from mmreason.rl.options import check_options
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import POLICY_LOSSES

_DEFAULTS = {f.name: f for f in fields(LossInputs)}


def _keyword_signature(loss: Callable[..., LossOutput]) -> inspect.Signature:
    """``(logprobs, old_logprobs, advantages, mask, *, <options>, <the fields the loss takes>)``."""
    contract = contract_of(loss)
    options = [p for p in inspect.signature(loss).parameters.values() if p.kind is p.KEYWORD_ONLY]
    params = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in TENSORS]
    for name in contract.takes:
        spec = _DEFAULTS[name]
        default = contract.defaults.get(name, spec.default)
        required = name in contract.needs
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=inspect.Parameter.empty if required else default,
                annotation=spec.type,
            )
        )
    return inspect.Signature([*params, *options], return_annotation="LossOutput")


def tensor_form(loss: Callable[..., LossOutput], name: str | None = None) -> Callable[..., LossOutput]:
    """The keyword form of ``loss``: ``fn(logprobs, old_logprobs, advantages, mask, **keywords)``.

    Keywords that are fields the loss takes (``ref_logprobs``, ``beta``, ``group_ids``, its declared extras)
    go into ``LossInputs``; the others are its options. A keyword it takes neither way raises ``TypeError``
    naming it, as does a field it needs that is missing.
    """
    contract = contract_of(loss)
    label = name or loss.__name__
    signature = _keyword_signature(loss)

    def call(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, **keywords: Any) -> LossOutput:
        check_options("policy loss", label, call, keywords)
        taken = {k: keywords.pop(k) for k in contract.takes if k in keywords}
        x = LossInputs(logprobs, old_logprobs, advantages, mask, **{**contract.defaults, **taken})
        return loss(x.on_device(), **keywords)

    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__name__ = call.__qualname__ = label
    call.__doc__ = loss.__doc__
    call.__module__ = loss.__module__
    call.loss_contract = replace(contract, call="tensors")  # type: ignore[attr-defined]
    return call


def policy_loss(
    name: str, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, **keywords: Any
) -> LossOutput:
    """The policy loss registered as ``name`` (``clipped``, ``reg_grpo``, ...) in its keyword form.

    A keyword that is neither a field the loss takes nor one of its options raises ``TypeError`` naming it.
    """
    fn = POLICY_LOSSES.get(name)
    if contract_of(fn).call == "inputs":
        fn = tensor_form(fn, name)
    else:
        check_options("policy loss", name, fn, keywords)
    return fn(logprobs, old_logprobs, advantages, mask, **keywords)


def call_loss(fn: Callable[..., LossOutput], x: LossInputs, options: dict[str, Any]) -> LossOutput:
    """Call a registered loss on the trainer's record: ``fn(x, **options)``, or ``fn`` in its keyword form
    (a loss that wraps a ``tensor_form`` one) with the fields it takes."""
    missing = missing_needs(fn, x)
    if missing:
        raise TypeError(f"policy loss {fn.__name__!r} needs {', '.join(missing)}; the trainer left it unset")
    x = x.on_device()  # the trainer's CPU-side fields (group ids, rewards) join log-probs' device once, here
    contract = contract_of(fn)
    if contract.call == "inputs":
        return fn(x, **options)
    taken = {k: getattr(x, k) for k in contract.takes}
    return fn(*(getattr(x, k) for k in TENSORS), **taken, **options)
