"""The policy update of one GRPO step: num_iterations passes over mini-batches, each an exact share of
the whole batch's gradient (policy loss + KL to a reference + entropy band), then one optimizer step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mmreason import rl
from mmreason.parallel.agree import any_rank, equal_minibatches
from mmreason.parallel.gradients import is_ddp
from mmreason.parallel.sharding import is_sharded
from mmreason.rl.losses.gepo import group_entropies
from mmreason.rollout import shared_prefix
from mmreason.rollout.forward import collate, token_logprobs
from mmreason.rollout.generate import suppressed_token_ids
from mmreason.train.config import NAMED_LOSS_OPTIONS, TrainConfig, accepted_options
from mmreason.train.minibatches import length_sorted_minibatches
from mmreason.train.optimizer_step import gradients_finite, optimizer_step, skip_update  # noqa: F401
from mmreason.train.records import task_index
from mmreason.train.sampler_logprobs import corrects_with_sampler, off_policy_masked, rollout_correction  # noqa: F401
from mmreason.train.setup import Run
from mmreason.train.table import StepTable
from mmreason.train.vision_calls import match_vision_calls, needs_matching, without_stand_ins
from mmreason.train.vps import segment_progress
from mmreason.types import Trajectory


@dataclass
class MiniBatch:
    """One mini-batch of an optimizer step's share: whole groups, collated, with the passes taken before the
    update (log-probs ``[n, T]`` under the sampling policy and the reference; None when not needed)."""

    rows: list[int]  # indices into the kept trajectories
    trajectories: list[Trajectory]
    inputs: Any  # the collated batch (input ids, masks, visual inputs) on the device
    weight: float  # 1, or 0 for a stand-in that keeps the processes' mini-batch counts equal
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    tempered_logprobs: torch.Tensor | None = None  # at the temperature a loss picks (DCPO), else None
    segment_progress: torch.Tensor | None = None  # [n, T] GRPO-VPS segment progress of each token, else None


@dataclass
class Share:
    """The groups of one optimizer step, as mini-batches, and their response tokens (token-mean aggregation)."""

    rows: list[int]
    minibatches: list[MiniBatch]
    tokens: float


def policy_update(run: Run, table: StepTable) -> dict[str, float]:
    """num_iterations passes; each pass is ``steps_per_generation`` optimizer steps, one per share of the
    batch's groups, with gradient accumulation over mini-batches inside each step.

    Mini-batch losses are weighted so a step's accumulated gradient is that of its share: token-mean
    aggregation divides by the share's response tokens, sequence-mean ones weight each mini-batch by its
    fraction of the share's trajectories. Old log-probs are taken once, before the first optimizer step,
    whenever there is more than one (so later steps see the ratio to the policy that sampled).
    """
    cfg, a = run.cfg, run.cfg.algorithm
    keep = table.keep.tolist()
    trajs = [t for t, k in zip(table.trajectories, keep) if k]
    if any_rank(run.accelerator, not trajs):  # every process skips when one has nothing to train on
        return {"loss": 0.0, "skipped_update": 1.0}
    adv = table.advantages[table.keep]  # [N]
    gids = torch.tensor([t.group_id for t in trajs])  # [N]
    band = entropy_band_rows(a, [name for name, k in zip(table.tasks, keep) if k])
    token_mean = rl.aggregation_for_loss_type(a.loss_type) == "token_mean"
    shares = plan_shares(run, trajs)
    minibatches = [mb for share in shares for mb in share.minibatches]
    off_policy = a.num_iterations > 1 or len(shares) > 1
    policy, by_hand = update_model(run, trajs)
    stats: dict[str, list[float]] = {"update/shared_prefix": [float(uses_shared_prefix(run, policy, trajs))]}
    with torch.no_grad():
        for mb in minibatches if off_policy else ():
            mb.old_logprobs = sequence_logprobs(run, policy, mb.inputs, mb.trajectories)[0]
        for mb in minibatches if run.ref_model is not None else ():
            mb.ref_logprobs = sequence_logprobs(run, run.ref_model, mb.inputs, mb.trajectories)[0]
        tempered_logprobs(run, policy, minibatches, stats)
        segment_progress(
            run, policy, minibatches, [s for s, k in zip(table.samples, keep) if k], stats, logprobs=sequence_logprobs
        )
    rewards = table.total[table.keep]  # [N] the kept rows' total rewards
    history: list[float] = []  # the step's group entropies, for losses that take entropy_history (GEPO)
    wants_history = "entropy_history" in rl.contract_of(rl.POLICY_LOSSES.get(a.policy_loss)).takes
    for iteration in range(a.num_iterations):
        for share in shares:
            for mb in share.minibatches:
                rows_in = {
                    "prev_entropy": run.prev_entropy,
                    "step_rewards": rewards,
                    "rewards": rewards[mb.rows],
                    "tempered_logprobs": mb.tempered_logprobs,
                    "segment_progress": mb.segment_progress,
                    "entropy_history": torch.tensor(run.entropy_history, dtype=torch.float32),
                }
                fields = loss_fields(a, cfg, mb.ref_logprobs, gids[mb.rows], run.step - 1, rows_in)
                if token_mean:
                    fields["num_tokens"] = share.tokens
                rows = None if band is None else tuple(x[mb.rows].to(run.device) for x in band)
                loss, metrics, ent = minibatch_loss(
                    run,
                    mb.inputs,
                    mb.trajectories,
                    mb.old_logprobs,
                    adv[mb.rows].to(run.device),
                    fields,
                    rows,
                    stats,
                    policy,
                )
                loss = (loss if token_mean else loss * (len(mb.rows) / len(share.rows))) * mb.weight
                if any_rank(run.accelerator, not torch.isfinite(loss)):  # all processes skip together
                    return skip_update(run, "nonfinite_loss")
                run.accelerator.backward(loss)
                if mb.weight:
                    _collect(stats, metrics, ent, mb.inputs.action_mask, loss)
                    if wants_history and iteration == 0:
                        history += group_entropy_values(ent, mb.inputs.action_mask, gids[mb.rows])
            grad_norm = optimizer_step(run, by_hand=by_hand)  # every process skips together on a NaN
            if grad_norm is None:
                return {"loss": float("nan"), "skipped_update": 1.0}
            stats.setdefault("grad_norm", []).append(float(grad_norm))
    keep_group_entropies(run, history)
    return {k: sum(v) / len(v) for k, v in stats.items()}


ENTROPY_HISTORY = 1024  # group entropies kept across steps for the losses that read them (GEPO)


def keep_group_entropies(run: Run, values: list[float]) -> None:
    """The step's group entropies (first pass) appended to ``run.entropy_history``, the last ENTROPY_HISTORY kept."""
    run.entropy_history = (list(run.entropy_history) + values)[-ENTROPY_HISTORY:]


def group_entropy_values(entropy, mask, group_ids) -> list[float]:
    """The mean token entropy of each group of a mini-batch (GEPO's group entropy)."""
    _, values = group_entropies(entropy.detach(), mask.float(), group_ids.to(entropy.device))
    return [float(v) for v in values]


def plan_shares(run: Run, trajs: list[Trajectory]) -> list[Share]:
    """The kept trajectories in ``steps_per_generation`` shares of whole groups, each in length-sorted
    mini-batches of at most ``mini_batch_size`` (as many on every process: ``agree.equal_minibatches``), each
    making the same vision calls on every process (``vision_calls.match_vision_calls``)."""
    cfg = run.cfg
    pad = run.processor.tokenizer.pad_token_id
    parts = split_groups([t.group_id for t in trajs], cfg.steps_per_generation)  # [[row, ...] per step]
    chunks = [length_sorted_minibatches(part, trajs, cfg.mini_batch_size) for part in parts]  # longest first
    parts, chunks, weights = equal_minibatches(run.accelerator, parts, chunks, cfg.steps_per_generation)
    members = [[[trajs[i] for i in rows] for rows in cs] for cs in chunks]
    batches = iter(match_vision_calls(run, [(m, collate(m, pad).to(run.device)) for ms in members for m in ms]))
    shares = []
    for part, cs, ms, ws in zip(parts, chunks, members, weights):
        minibatches = [MiniBatch(rows, m, next(batches), weight) for rows, m, weight in zip(cs, ms, ws)]
        shares.append(Share(part, minibatches, float(sum(trajs[i].completion_length for i in part))))
    return shares


def tempered_logprobs(run: Run, policy, minibatches: list[MiniBatch], stats) -> None:
    """Behaviour-policy log-probs at the temperature the loss picks from the last step's entropy, set on each
    mini-batch (nothing unless the loss reads ``tempered_logprobs``, as DCPO does; its ``tempered_temperature``
    names T')."""
    a = run.cfg.algorithm
    fn = rl.POLICY_LOSSES.get(a.policy_loss)
    pick = getattr(fn, "tempered_temperature", None)
    if "tempered_logprobs" not in rl.contract_of(fn).takes or pick is None:
        return
    wanted = accepted_options(pick)
    t = pick(run.prev_entropy, **{k: v for k, v in a.loss_options.items() if k in wanted})
    stats.setdefault("update/tempered_temperature", []).append(float(t))
    for mb in minibatches:
        mb.tempered_logprobs = sequence_logprobs(run, policy, mb.inputs, mb.trajectories, temperature=t)[0]


def split_groups(group_ids: list[int], parts: int) -> list[list[int]]:
    """Row indices in ``parts`` contiguous shares of whole groups (as equal in groups as they can be);
    fewer shares when there are fewer groups."""
    order: list[int] = []
    rows: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        if g not in rows:
            order.append(g)
        rows.setdefault(g, []).append(i)
    k = max(1, min(parts, len(order)))
    bounds = [round(j * len(order) / k) for j in range(k + 1)]
    return [[i for g in order[bounds[j] : bounds[j + 1]] for i in rows[g]] for j in range(k)]


def update_model(run: Run, trajectories) -> tuple[Any, bool]:
    """The module the update's policy passes run, and whether its gradients are averaged by hand.

    A DDP-wrapped policy whose step can take the shared prefix on every process runs unwrapped (the prefix
    and completion passes are not one forward of the wrapper) and its gradients are averaged before the
    optimizer step; the processes agree, so none waits in a collective the others skip."""
    model = run.model
    if not is_ddp(model) or not run.cfg.shared_prefix:
        return model, False
    inner = run.accelerator.unwrap_model(model)
    if any_rank(run.accelerator, not shared_prefix.applies(inner, trajectories)):
        return model, False
    return inner, True


def uses_shared_prefix(run: Run, model, trajectories) -> bool:
    # A sharded model all-gathers in every forward: it takes the plain path (one forward per mini-batch,
    # as many on every process) rather than the shared prefix's forwards per group.
    return run.cfg.shared_prefix and not is_sharded(model) and shared_prefix.applies(model, trajectories)


def sequence_logprobs(
    run: Run, model, batch, trajectories, with_entropy: bool = False, temperature: float | None = None
):
    """Per-token log-probs [n, T] (and entropies) of a mini-batch under ``model``: with the prompt of each
    group encoded once (``shared_prefix``, the default where it applies), else the plain padded forward.
    ``temperature`` replaces the sampling temperature (logits / temperature) when given."""
    sampling = sampling_options(run)
    if temperature is not None:
        sampling["temperature"] = temperature
    if uses_shared_prefix(run, model, trajectories):
        with run.accelerator.autocast():
            return shared_prefix.shared_prefix_logprobs(
                model,
                trajectories,
                batch.input_ids.shape[1],
                run.processor.tokenizer.pad_token_id,
                with_entropy,
                **sampling,
            )
    if not needs_matching(run.accelerator, model):
        batch = without_stand_ins(batch)
    with run.accelerator.autocast():  # the head computes in the run's precision too (rl.lm_head)
        return token_logprobs(model, batch, with_entropy, **sampling)


def minibatch_loss(run: Run, batch, trajectories, old_logprobs, advantages, fields, band, stats, model=None):
    """Policy loss (+ KL, + entropy band) of one mini-batch: (loss, loss metrics, entropy [n, T]).

    The loss reads one ``rl.LossInputs``: this forward's log-probs, entropies (detached) and token ids, the
    corrected advantages, and ``fields`` (``loss_fields``)."""
    a = run.cfg.algorithm
    logp, ent = sequence_logprobs(run, model or run.model, batch, trajectories, with_entropy=True)  # [n, T] fp32
    old = old_logprobs if old_logprobs is not None else logp.detach()  # on-policy: ratio 1
    advantages = rollout_correction(run, trajectories, old, batch.action_mask, advantages, stats)
    advantages = off_policy_masked(run, trajectories, logp, old, batch.action_mask, advantages, stats)
    fn = rl.POLICY_LOSSES.get(a.policy_loss)
    x = rl.LossInputs(
        logp, old, advantages, batch.action_mask, entropy=ent.detach(), token_ids=batch.input_ids, **fields
    )
    out = rl.call_loss(fn, x, dict(a.loss_options))
    loss = out.loss
    if band is not None:
        h_min, h_max, ids = band
        penalty = rl.entropy_band_penalty(ent, batch.action_mask, h_min, h_max, ids)
        loss = loss + a.entropy_coef * penalty
        stats.setdefault("entropy_penalty", []).append(float(penalty.detach()))
    return loss, out.metrics, ent


def sampling_options(run: Run) -> dict[str, Any]:
    """What makes the trainer's log-probs those of the sampler: ``rollout.temperature`` (1 for greedy) and
    the vision specials that generation suppresses. Like TRL, top-p / top-k truncation is not applied."""
    temperature = run.cfg.rollout.temperature
    return {
        "temperature": temperature if temperature > 0 else 1.0,
        "suppressed": suppressed_token_ids(run.processor.tokenizer),
    }


def entropy_band_rows(a, tasks: list[str]):
    """Per-row entropy bands from ``algorithm.entropy_band`` (None when entropy shaping is off)."""
    if a.entropy_coef == 0 or not a.entropy_band:
        return None
    bands = []
    for name in tasks:
        band = a.entropy_band.get(name, a.entropy_band.get("default"))
        if band is None:
            raise ValueError(f"algorithm.entropy_band has no band for task {name!r} and no 'default'")
        bands.append(band)
    h = torch.tensor(bands, dtype=torch.float32)  # [N, 2]
    return h[:, 0], h[:, 1], task_index(tasks)


def loss_fields(
    a, cfg: TrainConfig, ref_logprobs, group_ids, train_step: int = 0, rows_in: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The ``rl.LossInputs`` fields of a mini-batch beside its forward: the settings (aggregation from
    ``loss_type``, ``max_len``, the named top-level keys ``beta``, ``epsilon`` ...), the reference log-probs, the
    group ids, ``train_step`` (finished steps, for annealed options) and ``rows_in`` (``prev_entropy`` = the last step's
    mean token entropy, ``step_rewards`` [N] / ``rewards`` [n] = total rewards of the step's / the mini-batch's
    rows, ``tempered_logprobs``, ``segment_progress``, ``entropy_history``)."""
    return dict(
        aggregation=rl.aggregation_for_loss_type(a.loss_type),
        max_len=cfg.rollout.max_completion_length,
        ref_logprobs=ref_logprobs,
        group_ids=group_ids,
        train_step=max(train_step, 0),
        **{k: getattr(a, k) for k in NAMED_LOSS_OPTIONS},
        **(rows_in or {}),
    )


def _loss_options(
    a, cfg: TrainConfig, ref_logprobs, group_ids, train_step: int = 0, rows_in: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What reaches the loss, by name (the keyword form of ``rl.policy_loss``): the fields of ``loss_fields``
    its contract takes, then its options."""
    takes = rl.contract_of(rl.POLICY_LOSSES.get(a.policy_loss)).takes
    fields = loss_fields(a, cfg, ref_logprobs, group_ids, train_step, rows_in)
    return {k: v for k, v in fields.items() if k in takes} | dict(a.loss_options)


def _collect(stats: dict[str, list[float]], metrics, entropy, mask, loss) -> None:
    def add(key, value):
        if value is not None:
            stats.setdefault(key, []).append(float(value))

    add("loss", loss.detach())
    add("policy_loss", metrics.policy_loss)
    add("kl", metrics.kl)
    add("ratio_mean", metrics.ratio_mean)
    add("clip/low", metrics.clip_low)
    add("clip/high", metrics.clip_high)
    add("clip/region", metrics.clip_region)
    if entropy is not None:
        add("entropy", (entropy.detach() * mask).sum() / mask.sum().clamp(min=1))


# ---- one step and the loop ----------------------------------------------------------------------
