"""The four registries of the RL math and their decorators.

Loss formula, token aggregation and KL estimator are independent choices, so each has its own table:

- ``ESTIMATORS``: ``fn(rewards [N, K] fp32, group_ids [N] long, weights [K], **options)``
  ``-> Tensor[N] | AdvantageResult``
- ``POLICY_LOSSES``: ``fn(x: LossInputs, **options) -> LossOutput`` (``mmreason.rl.loss_inputs``: the
  micro-batch's tensors and settings; the loss declares the extra fields it reads)
- ``AGGREGATIONS``: ``fn(per_token_loss [N, T], mask [N, T], norm: Normalisers) -> Tensor[]``
- ``KL_ESTIMATORS``: ``fn(logprobs [N, T], ref_logprobs [N, T]) -> Tensor[N, T]``

Each registry imports the modules that fill it on its first lookup, so ``ESTIMATORS.names()`` is complete
even when only this module was imported; estimators and policy losses of other packages register through
the entry-point groups ``mmreason.estimators`` / ``mmreason.policy_losses``, and a config may name one by
reference (``my_pkg.rl:my_estimator``, ``path/to/file.py:my_loss``), as it names a reward.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, TypeVar

from mmreason.registry import Registry
from mmreason.rl.loss_inputs import LossContract
from mmreason.rl.options import check_choices, choices_of

F = TypeVar("F", bound=Callable[..., Any])


def _importer(*modules: str, group: str | None = None) -> Callable[[], None]:
    """Import the built-in modules, then every module of the entry-point ``group`` (outside packages)."""

    def load() -> None:
        for module in modules:
            importlib.import_module(module)
        if group is not None:
            for ep in entry_points(group=group):
                ep.load()

    return load


ESTIMATORS: Registry[Callable[..., Any]] = Registry(
    "estimator", loader=_importer("mmreason.rl.estimators", group="mmreason.estimators")
)
POLICY_LOSSES: Registry[Callable[..., Any]] = Registry(
    "policy loss", loader=_importer("mmreason.rl.losses", group="mmreason.policy_losses")
)
AGGREGATIONS: Registry[Callable[..., Any]] = Registry(
    "loss aggregation", loader=_importer("mmreason.rl.losses.aggregation")
)
KL_ESTIMATORS: Registry[Callable[..., Any]] = Registry("KL estimator", loader=_importer("mmreason.rl.losses.kl"))


def register_estimator(
    name: str | None = None, *, replace: bool = False, needs: tuple[str, ...] = (), provenance: str | None = None
) -> Callable[[F], F]:
    """Decorator: register an advantage estimator under ``name`` (default: the function name).

    ``needs``: per-trajectory columns ``[N]`` the estimator takes as keyword arguments of the same name
    (``fidelity``, ``step_index`` ...). The trainer checks at start-up that the run can produce each one (a
    reward sub-score or a sample column of that name) and passes it from the step's table. ``provenance``:
    where its formula comes from (a key of ``mmreason.registry.PROVENANCES``; `mmreason list` prints it).
    """

    def decorator(fn: F) -> F:
        fn.__dict__["needs"] = tuple(needs)
        ESTIMATORS.register(name, replace=replace, provenance=provenance)(fn)
        return fn

    return decorator


def needs_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The per-trajectory columns a registered estimator or loss declared (none when it declared nothing)."""
    return tuple(getattr(fn, "needs", ()))


def loss_contract(
    *, reads: tuple[str, ...] = (), needs: tuple[str, ...] = (), defaults: Mapping[str, Any] | None = None
) -> Callable[[F], F]:
    """Decorator: declare a loss's contract (``LossContract``) without registering it (a loss named by reference)."""

    def decorator(fn: F) -> F:
        fn.__dict__["loss_contract"] = LossContract(tuple(reads), tuple(needs), dict(defaults or {}))
        return fn

    return decorator


def register_policy_loss(
    name: str | None = None,
    *,
    replace: bool = False,
    reads: tuple[str, ...] = (),
    needs: tuple[str, ...] = (),
    defaults: Mapping[str, Any] | None = None,
    provenance: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a policy loss ``fn(x: LossInputs, **options) -> LossOutput`` under ``name``.

    ``reads``: the extra LossInputs fields it reads (``epsilon``, ``entropy``, ``rewards`` ...); ``needs``: the
    fields it cannot do without; ``defaults``: its own defaults of fields for a caller that sets none. An option
    typed ``Literal[...]`` is checked on every call: another value raises ``ValueError`` naming it.
    ``provenance``: where its formula comes from (a key of ``mmreason.registry.PROVENANCES``).
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        choices: list[dict[str, tuple[Any, ...]]] = []  # resolved on the first call, once the module is loaded

        @functools.wraps(fn)
        def checked(x: Any, **options: Any) -> Any:
            if not choices:
                choices.append(choices_of(fn))
            check_choices("policy loss", name or fn.__name__, choices[0], options)
            return fn(x, **options)

        declared = loss_contract(reads=reads, needs=needs, defaults=defaults)(checked)
        return POLICY_LOSSES.register(name, replace=replace, provenance=provenance)(declared)

    return decorator


def register_aggregation(
    name: str | None = None, *, replace: bool = False, provenance: str | None = None
) -> Callable[[F], F]:
    """Decorator: register a token aggregation under ``name``."""

    def decorator(fn: F) -> F:
        AGGREGATIONS.register(name, replace=replace, provenance=provenance)(fn)
        return fn

    return decorator


def register_kl_estimator(
    name: str | None = None, *, replace: bool = False, provenance: str | None = None
) -> Callable[[F], F]:
    """Decorator: register a per-token KL estimator under ``name``."""

    def decorator(fn: F) -> F:
        KL_ESTIMATORS.register(name, replace=replace, provenance=provenance)(fn)
        return fn

    return decorator
