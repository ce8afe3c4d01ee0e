"""How a policy loss is called: one form, ``fn(x: LossInputs, **options)``.

``call_loss`` is how the trainer calls a registered loss with the record it built. ``policy_loss(name, logprobs,
old_logprobs, advantages, mask, **keywords)`` is the same call for a caller holding plain tensors (tests,
notebooks): the keywords that are LossInputs fields the loss takes build the record, the rest are its options.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import Tensor

from mmreason.registry import closest
from mmreason.rl.loss_inputs import FIELDS, LossInputs, contract_of, missing_needs, options_of
from mmreason.rl.options import check_options
from mmreason.rl.records import LossOutput
from mmreason.rl.registries import POLICY_LOSSES


def policy_loss(
    name: str, logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, **keywords: Any
) -> LossOutput:
    """The policy loss registered as ``name`` (``clipped``, ``reg_grpo``, ...) on plain tensors.

    Keywords that are fields the loss takes (``ref_logprobs``, ``beta``, ``group_ids``, its declared extras) go
    into ``LossInputs`` (with the loss's own defaults of fields for those not given); the others are its
    options. A field the loss does not take, an option it does not have, or a field it needs that is missing
    raises ``TypeError`` naming it.
    """
    fn = POLICY_LOSSES.get(name)
    contract = contract_of(fn)
    ignored = [k for k in keywords if k in FIELDS and k not in contract.takes]
    if ignored:
        raise TypeError(f"policy loss {name!r} takes no {', '.join(ignored)}; it takes {', '.join(contract.takes)}")
    taken = {k: keywords.pop(k) for k in contract.takes if k in keywords}
    options = options_of(fn)
    for k in keywords:
        if k not in options:
            hint = closest(k, [*options, *contract.takes])
            raise TypeError(
                f"policy loss {name!r} has no option {k!r}"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; its options: {', '.join(options) or '(none)'}; the fields it takes: {', '.join(contract.takes)}"
            )
    check_options("policy loss", name, fn, keywords)  # the options it cannot do without
    x = LossInputs(logprobs, old_logprobs, advantages, mask, **{**contract.defaults, **taken})
    return call_loss(fn, x, keywords)


def call_loss(fn: Callable[..., LossOutput], x: LossInputs, options: dict[str, Any]) -> LossOutput:
    """Call a registered loss on the trainer's record: ``fn(x, **options)``, once the fields it needs are set."""
    missing = missing_needs(fn, x)
    if missing:
        raise TypeError(f"policy loss {fn.__name__!r} needs {', '.join(missing)}; the trainer left it unset")
    return fn(x.on_device(), **options)  # the trainer's CPU-side fields join log-probs' device once, here
