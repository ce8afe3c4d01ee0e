"""The policy update of one GRPO step: num_iterations passes over mini-batches, each an exact share of
the whole batch's gradient (policy loss + KL to a reference + entropy band), then one optimizer step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mmreason import rl
from mmreason.parallel.agree import any_rank, equal_minibatches
from mmreason.parallel.gradient_sync import sync_gradients
from mmreason.parallel.gradients import is_ddp
from mmreason.parallel.sharding import is_sharded
from mmreason.rollout import packing, shared_prefix
from mmreason.rollout.forward import ModelBatch, collate, token_logprobs
from mmreason.rollout.generate import suppressed_token_ids
from mmreason.train.config import AlgorithmConfig
from mmreason.train.loss_extras import UpdateView
from mmreason.train.optimizer_step import gradients_finite, optimizer_step, skip_update  # noqa: F401
from mmreason.train.records import task_index
from mmreason.train.sampler_logprobs import corrects_with_sampler, off_policy_masked, rollout_correction  # noqa: F401
from mmreason.train.setup import Run
from mmreason.train.table import StepTable
from mmreason.train.token_budget import micro_batches
from mmreason.train.vision_calls import match_vision_calls, needs_matching, without_stand_ins
from mmreason.types import Trajectory


# compared by identity: the update finds a mini-batch's index in its plan
@dataclass(eq=False)
class MiniBatch:
    """One mini-batch of an optimizer step's share: whole groups, collated, with the passes taken before the
    update (log-probs ``[n, T]`` under the sampling policy and the reference; None when not needed)."""

    rows: list[int]  # indices into the kept trajectories
    trajectories: list[Trajectory]
    # the collated batch (input ids, masks, visual inputs) on the device
    inputs: Any
    # 1, or 0 for a stand-in that keeps the processes' mini-batch counts equal
    weight: float
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None


@dataclass
class Share:
    """The groups of one optimizer step, as mini-batches, and their response tokens (token-mean aggregation)."""

    rows: list[int]
    minibatches: list[MiniBatch]
    tokens: float


@dataclass
class UpdatePlan:
    """What the update works on, fixed before it starts (``plan_update``): the kept rows' trajectories, their
    advantages, group ids, total rewards and samples (``[N]``, by kept row), the shares, the module the passes
    run (``update_model``) and how the losses are weighted."""

    trajectories: list[Trajectory]
    advantages: torch.Tensor  # [N]
    group_ids: torch.Tensor  # [N]
    rewards: torch.Tensor  # [N] total rewards
    samples: list[Any]
    band: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # per-row entropy bands, None when off
    shares: list[Share]
    policy: Any
    # gradients averaged by hand (the DDP wrapper's reducer saw no forward)
    by_hand: bool
    # token-mean aggregation: each loss over the share's tokens, else weighted by rows
    token_mean: bool

    @property
    def minibatches(self) -> list[MiniBatch]:
        return [mb for share in self.shares for mb in share.minibatches]


def policy_update(run: Run, table: StepTable) -> dict[str, float]:
    """Run the update in its phases: plan -> pre-passes -> accumulate -> optimizer step.

    ``num_iterations`` passes; each pass is ``steps_per_generation`` optimizer steps, one per share of the batch's
    groups, with gradient accumulation over the share's mini-batches. Mini-batch losses are weighted so a step's
    accumulated gradient is that of its share (``accumulate``). A non-finite loss or gradient on any process
    makes every process skip the update."""
    plan = plan_update(run, table)
    if plan is None:  # every process skips when one has nothing to train on
        return {"loss": 0.0, "skipped_update": 1.0}
    shared = uses_shared_prefix(run, plan.policy, plan.trajectories)
    packed = packing.uses(run.cfg.padding_free, plan.policy) and not shared  # rollout/packing.py
    stats: dict[str, list[float]] = {"update/shared_prefix": [float(shared)], "update/padding_free": [float(packed)]}
    with torch.no_grad():
        for key, value in pre_passes(run, plan).items():
            stats.setdefault(key, []).append(value)
    for iteration in range(run.cfg.algorithm.num_iterations):
        for share in plan.shares:
            for mb in share.minibatches:
                if not accumulate(run, plan, share, mb, stats, first_pass=iteration == 0):
                    return skip_update(run, "nonfinite_loss")
            grad_norm = optimizer_step(run, by_hand=plan.by_hand)  # every process skips together on a NaN
            if grad_norm is None:
                return {"loss": float("nan"), "skipped_update": 1.0}
            stats.setdefault("grad_norm", []).append(grad_norm)
    metrics = {k: sum(v) / len(v) for k, v in stats.items()}
    run.loss_extras.after_update(metrics.get("entropy"))
    return metrics


def plan_update(run: Run, table: StepTable) -> UpdatePlan | None:
    """Plan the kept rows, in shares of mini-batches (``plan_shares``), and the module the passes run; None when any
    process has no row to train on (every process then skips)."""
    a = run.cfg.algorithm
    assert table.advantages is not None and table.keep is not None  # set by the advantage phase
    keep = table.keep.tolist()
    trajs = [t for t, k in zip(table.trajectories, keep) if k]
    if any_rank(run.accelerator, not trajs):
        return None
    policy, by_hand = update_model(run, trajs)
    return UpdatePlan(
        trajectories=trajs,
        advantages=table.advantages[table.keep],
        group_ids=torch.tensor([t.group_id for t in trajs]),
        rewards=table.total[table.keep],
        samples=[s for s, k in zip(table.samples, keep) if k],
        band=entropy_band_rows(a, [name for name, k in zip(table.tasks, keep) if k]),
        shares=plan_shares(run, trajs),
        policy=policy,
        by_hand=by_hand,
        token_mean=rl.aggregation_for_loss_type(a.loss_type) == "token_mean",
    )


def pre_passes(run: Run, plan: UpdatePlan) -> dict[str, float]:
    """Run the pre-passes (no gradient) and return their metrics. Old log-probs come whenever there is more than one
    optimizer step, so later steps see the ratio to the policy that sampled. Reference log-probs come with a KL term.
    Last comes what the loss's providers compute before the update (``loss_extras``: DCPO's tempered forward, the VPS
    probes)."""
    minibatches = plan.minibatches
    if run.cfg.algorithm.num_iterations > 1 or len(plan.shares) > 1:
        for mb in minibatches:
            mb.old_logprobs = sequence_logprobs(run, plan.policy, mb.inputs, mb.trajectories)[0]
    if run.ref_model is not None:
        for mb in minibatches:
            mb.ref_logprobs = sequence_logprobs(run, run.ref_model, mb.inputs, mb.trajectories)[0]

    def forward(batch: ModelBatch, trajectories: list[Trajectory], temperature: float | None = None) -> torch.Tensor:
        return sequence_logprobs(run, plan.policy, batch, trajectories, temperature=temperature)[0]

    return run.loss_extras.before_update(UpdateView(run, minibatches, plan.samples, forward))


def accumulate(
    run: Run, plan: UpdatePlan, share: Share, mb: MiniBatch, stats: dict[str, list[float]], *, first_pass: bool
) -> bool:
    """Accumulate one mini-batch's weighted loss backward into the share's gradient. Token-mean aggregation divides by
    the share's response tokens; sequence-mean ones weight the mini-batch by its fraction of the share's rows; a
    stand-in (weight 0) adds nothing. False when any process's loss is not finite."""
    loss, metrics, ent = minibatch_loss(run, plan, share, mb, stats)
    loss = (loss if plan.token_mean else loss * (len(mb.rows) / len(share.rows))) * mb.weight
    if any_rank(run.accelerator, not torch.isfinite(loss)):  # all processes skip together
        return False
    sync_gradients(plan.policy, mb is share.minibatches[-1])  # one gradient reduction per optimizer step
    run.accelerator.backward(loss)
    if mb.weight:
        _collect(stats, metrics, ent, mb.inputs.action_mask, loss)
        if first_pass:
            k = plan.minibatches.index(mb)
            run.loss_extras.after_minibatch(k, ent, mb.inputs.action_mask, plan.group_ids[mb.rows])
    return True


def plan_shares(run: Run, trajs: list[Trajectory]) -> list[Share]:
    """Split the kept trajectories into ``steps_per_generation`` shares of whole groups. Each share is cut into
    length-sorted mini-batches of at most ``mini_batch_size`` rows or ``max_tokens_per_micro_batch`` tokens, as many on
    every process (``token_budget.micro_batches``, ``agree.equal_minibatches``). Each mini-batch makes the same vision
    calls on every process (``vision_calls.match_vision_calls``)."""
    cfg = run.cfg
    pad = run.processor.tokenizer.pad_token_id
    parts = split_groups([t.group_id for t in trajs], cfg.steps_per_generation)  # [[row, ...] per step]
    chunks = micro_batches(  # longest first; by rows, or by tokens (token_budget)
        run.accelerator,
        parts,
        trajs,
        mini_batch_size=cfg.mini_batch_size,
        max_tokens=cfg.max_tokens_per_micro_batch,
        most_parts=cfg.steps_per_generation,
        shared_prompt=uses_shared_prefix(run, run.model, trajs),
    )
    parts, chunks, weights = equal_minibatches(run.accelerator, parts, chunks, cfg.steps_per_generation)
    members = [[[trajs[i] for i in rows] for rows in cs] for cs in chunks]
    batches = iter(match_vision_calls(run, [(m, collate(m, pad).to(run.device)) for ms in members for m in ms]))
    shares = []
    for part, cs, ms, ws in zip(parts, chunks, members, weights):
        minibatches = [MiniBatch(rows, m, next(batches), weight) for rows, m, weight in zip(cs, ms, ws)]
        shares.append(Share(part, minibatches, float(sum(trajs[i].completion_length for i in part))))
    return shares


def split_groups(group_ids: list[int], parts: int) -> list[list[int]]:
    """Split row indices into ``parts`` contiguous shares of whole groups (as equal in groups as they can be); fewer
    shares when there are fewer groups."""
    order: list[int] = []
    rows: dict[int, list[int]] = {}
    for i, g in enumerate(group_ids):
        if g not in rows:
            order.append(g)
        rows.setdefault(g, []).append(i)
    k = max(1, min(parts, len(order)))
    bounds = [round(j * len(order) / k) for j in range(k + 1)]
    return [[i for g in order[bounds[j] : bounds[j + 1]] for i in rows[g]] for j in range(k)]


def update_model(run: Run, trajectories: list[Trajectory]) -> tuple[torch.nn.Module, bool]:
    """Return the module the update's policy passes run, and whether its gradients are averaged by hand.

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


def uses_shared_prefix(run: Run, model: torch.nn.Module, trajectories: list[Trajectory]) -> bool:
    # A sharded model all-gathers in every forward: it takes the plain path (one forward per mini-batch,
    # as many on every process) rather than the shared prefix's forwards per group.
    return run.cfg.shared_prefix and not is_sharded(model) and shared_prefix.applies(model, trajectories)


def sequence_logprobs(
    run: Run,
    model: torch.nn.Module,
    batch: ModelBatch,
    trajectories: list[Trajectory],
    with_entropy: bool = False,
    *,
    temperature: float | None = None,
    **options: Any,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute per-token log-probs [n, T] (and entropies) of a mini-batch under ``model``: with the prompt of each group
    encoded once (``shared_prefix``, the default where it applies), else the plain padded forward. ``temperature``
    replaces the sampling temperature (logits / temperature) when given; ``options``: the log-prob functions' own
    (``entropy_grad``)."""
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
                **options,
            )
    if not needs_matching(run.accelerator, model):
        batch = without_stand_ins(batch)
    packed = packing.uses(run.cfg.padding_free, model)  # one row per mini-batch, no padding (rollout/packing.py)
    with run.accelerator.autocast():  # the head computes in the run's precision too (rl.lm_head)
        return token_logprobs(model, batch, with_entropy, packed=packed, **sampling, **options)


def minibatch_loss(
    run: Run, plan: UpdatePlan, share: Share, mb: MiniBatch, stats: dict[str, list[float]]
) -> tuple[torch.Tensor, rl.LossMetrics, torch.Tensor]:
    """Compute the policy loss (+ KL, + entropy band) of one mini-batch: (loss, loss metrics, entropy [n, T]).

    The loss reads one ``rl.LossInputs`` (``loss_inputs``): this forward's log-probs, entropies (detached) and
    token ids, the advantages corrected by the sampler's log-probs, the settings and the providers' fields."""
    a, batch = run.cfg.algorithm, mb.inputs
    # [n, T] fp32; the entropy differentiable only for the entropy band
    logp, ent = sequence_logprobs(
        run, plan.policy, batch, mb.trajectories, with_entropy=True, entropy_grad=plan.band is not None
    )
    assert ent is not None  # with_entropy=True
    old = mb.old_logprobs if mb.old_logprobs is not None else logp.detach()  # on-policy: ratio 1
    adv = plan.advantages[mb.rows].to(run.device)
    adv = rollout_correction(run, mb.trajectories, old, batch.action_mask, adv, stats=stats)
    adv = off_policy_masked(run, mb.trajectories, logp, old, batch.action_mask, advantages=adv, stats=stats)
    x = loss_inputs(run, plan, share, mb, logprobs=logp, old_logprobs=old, advantages=adv, entropy=ent)
    out = rl.call_loss(rl.POLICY_LOSSES.get(a.policy_loss), x, dict(a.loss_options))
    loss = out.loss
    if plan.band is not None:
        h_min, h_max, ids = (x[mb.rows].to(run.device) for x in plan.band)
        penalty = rl.entropy_band_penalty(ent, batch.action_mask, h_min, h_max, ids)
        loss = loss + a.entropy_coef * penalty
        stats.setdefault("entropy_penalty", []).append(float(penalty.detach()))
    return loss, out.metrics, ent


def loss_inputs(
    run: Run,
    plan: UpdatePlan,
    share: Share,
    mb: MiniBatch,
    *,
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    entropy: torch.Tensor,
) -> rl.LossInputs:
    """Build the mini-batch's ``rl.LossInputs``, field by field. They are the forward's tensors; the settings
    (aggregation from ``loss_type``, ``max_len``, the named top-level keys ``beta``, ``epsilon`` ...); the reference
    log-probs; the group ids; ``train_step`` (finished steps, for annealed options); the step's and the rows' total
    rewards. Last come the fields the loss's providers give (``run.loss_extras``: ``prev_entropy``,
    ``tempered_logprobs``, ``entropy_history``, ``segment_progress``)."""
    cfg, a = run.cfg, run.cfg.algorithm
    return rl.LossInputs(
        logprobs=logprobs,
        old_logprobs=old_logprobs,
        advantages=advantages,
        mask=mb.inputs.action_mask,
        group_ids=plan.group_ids[mb.rows],
        ref_logprobs=mb.ref_logprobs,
        beta=a.beta,
        kl_estimator=a.kl_estimator,
        aggregation=rl.aggregation_for_loss_type(a.loss_type),
        max_len=cfg.rollout.max_completion_length,
        num_tokens=share.tokens if plan.token_mean else None,
        epsilon=a.epsilon,
        epsilon_high=a.epsilon_high,
        importance_sampling_level=a.importance_sampling_level,
        train_step=max(run.step - 1, 0),
        rewards=plan.rewards[mb.rows],
        step_rewards=plan.rewards,
        entropy=entropy.detach(),
        token_ids=mb.inputs.input_ids,
        **run.loss_extras.inputs(plan.minibatches.index(mb)),
    )


def sampling_options(run: Run) -> dict[str, Any]:
    """Return what makes the trainer's log-probs those of the sampler: ``rollout.temperature`` (1 for greedy) and the
    vision specials that generation suppresses. Like TRL, top-p / top-k truncation is not applied."""
    temperature = run.cfg.rollout.temperature
    return {
        "temperature": temperature if temperature > 0 else 1.0,
        "suppressed": suppressed_token_ids(run.processor.tokenizer),
    }


def entropy_band_rows(a: AlgorithmConfig, tasks: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Return per-row entropy bands from ``algorithm.entropy_band`` (None when entropy shaping is off)."""
    if a.entropy_coef == 0 or not a.entropy_band:
        return None
    bands: list[list[float]] = []
    for name in tasks:
        band = a.entropy_band.get(name, a.entropy_band.get("default"))
        if band is None:
            raise ValueError(f"algorithm.entropy_band has no band for task {name!r} and no 'default'")
        bands.append(band)
    h = torch.tensor(bands, dtype=torch.float32)  # [N, 2]
    return h[:, 0], h[:, 1], task_index(tasks)


def _collect(
    stats: dict[str, list[float]],
    metrics: rl.LossMetrics,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    loss: torch.Tensor,
) -> None:
    def add(key: str, value: torch.Tensor | float | None) -> None:
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
