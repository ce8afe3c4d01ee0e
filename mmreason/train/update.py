"""The policy update of one GRPO step: num_iterations passes over mini-batches, each an exact share of
the whole batch's gradient (policy loss + KL to a reference + entropy band), then one optimizer step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from mmreason import rl
from mmreason.parallel.agree import any_rank, equal_minibatches
from mmreason.parallel.gradient_sync import sync_gradients
from mmreason.parallel.gradients import average_gradients, is_ddp
from mmreason.parallel.sharding import is_sharded
from mmreason.rl.losses.gepo import group_entropies
from mmreason.rl.rollout_correction import importance_weights, mismatch_metrics, off_policy_mask, vision_distance
from mmreason.rollout import shared_prefix
from mmreason.rollout.episode_stats import after_media
from mmreason.rollout.forward import collate, pad_stack, token_logprobs
from mmreason.rollout.generate import suppressed_token_ids
from mmreason.train.config import NAMED_LOSS_OPTIONS, TrainConfig, accepted_options
from mmreason.train.records import task_index
from mmreason.train.setup import Run
from mmreason.train.table import StepTable
from mmreason.train.token_budget import micro_batches
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
        segment_progress(run, policy, minibatches, [s for s, k in zip(table.samples, keep) if k], stats)
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
                sync_gradients(policy, mb is share.minibatches[-1])  # one reduction per optimizer step
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
                    return _skip_update(run, "nonfinite_loss")
                run.accelerator.backward(loss)
                if mb.weight:
                    _collect(stats, metrics, ent, mb.inputs.action_mask, loss)
                    if wants_history and iteration == 0:
                        history += group_entropy_values(ent, mb.inputs.action_mask, gids[mb.rows])
            if by_hand:  # the wrapper's reducer saw no forward: average as it would have
                average_gradients(run.accelerator, run.model.parameters())
            grad_norm = run.accelerator.clip_grad_norm_(run.model.parameters(), cfg.max_grad_norm)
            # Checked after clipping, on the gradients themselves: a norm can be finite while clipping (or a
            # gradient the norm did not see) leaves NaN behind.
            finite = bool(torch.isfinite(torch.as_tensor(grad_norm))) and gradients_finite(run.model.parameters())
            if any_rank(run.accelerator, not finite):
                return _skip_update(run, "nonfinite_grad")
            run.optimizer.step()
            run.scheduler.step()
            run.optimizer.zero_grad(set_to_none=True)
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
    mini-batches of at most ``mini_batch_size`` rows or ``max_tokens_per_micro_batch`` tokens (as many on every
    process: ``token_budget.micro_batches``, ``agree.equal_minibatches``), each
    making the same vision calls on every process (``vision_calls.match_vision_calls``)."""
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


def gradients_finite(parameters) -> bool:
    """True when every gradient (this process's shard of it) is finite; one device sync."""
    flags = []
    for p in parameters:
        g = p.grad
        if g is not None:
            g = g.to_local() if hasattr(g, "to_local") else g  # a DTensor shard (FSDP2)
            flags.append(torch.isfinite(g).all())
    return bool(torch.stack(flags).all()) if flags else True


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
    run: Run, model, batch, trajectories, with_entropy: bool = False, temperature: float | None = None, **options
):
    """Per-token log-probs [n, T] (and entropies) of a mini-batch under ``model``: with the prompt of each
    group encoded once (``shared_prefix``, the default where it applies), else the plain padded forward.
    ``temperature`` replaces the sampling temperature (logits / temperature) when given; ``options``: the
    log-prob functions' own (``entropy_grad``)."""
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
    with run.accelerator.autocast():  # the head computes in the run's precision too (rl.lm_head)
        return token_logprobs(model, batch, with_entropy, **sampling, **options)


def minibatch_loss(run: Run, batch, trajectories, old_logprobs, advantages, fields, band, stats, model=None):
    """Policy loss (+ KL, + entropy band) of one mini-batch: (loss, loss metrics, entropy [n, T]).

    The loss reads one ``rl.LossInputs``: this forward's log-probs, entropies (detached) and token ids, the
    corrected advantages, and ``fields`` (``loss_fields``)."""
    a = run.cfg.algorithm
    logp, ent = sequence_logprobs(  # [n, T] fp32; the entropy differentiable only for the entropy band
        run, model or run.model, batch, trajectories, with_entropy=True, entropy_grad=band is not None
    )
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


def rollout_correction(run: Run, trajectories, old, mask, advantages, stats):
    """With a sampler that returned its log-probs (vLLM, or HF with ``rollout.hf_sampler_logprobs``): log the
    sampler-trainer gap (``mismatch/*``, split by distance from the nearest vision token and by turn) and, with
    ``rollout.vllm_importance_sampling_correction`` (HF: and ``rollout.hf_importance_sampling_correction``),
    weight each token's advantage by the truncated importance ratio (``rl.rollout_correction``; a clipped or
    plain surrogate times w >= 0 is the surrogate of the weighted advantage). Returns the advantages."""
    if not trajectories or any(t.rollout_logprobs is None for t in trajectories):
        return advantages
    r = run.cfg.rollout
    width = old.shape[1]
    rollout = _to_width(pad_stack([t.rollout_logprobs for t in trajectories], 0.0, torch.float32), width)
    distance = _to_width(
        pad_stack(
            [
                vision_distance(
                    t.mm_token_type_ids if t.mm_token_type_ids is not None else torch.zeros_like(t.token_ids)
                )
                for t in trajectories
            ],
            -1,
            torch.long,
        ),
        width,
    )
    turn = _to_width(pad_stack([_turn_index(t) for t in trajectories], 0, torch.long), width)
    shown = _to_width(pad_stack([after_media(t) for t in trajectories], False, torch.bool), width).to(old.device)
    rollout, distance, turn = rollout.to(old.device), distance.to(old.device), turn.to(old.device)
    cap = r.vllm_importance_sampling_cap
    for key, value in mismatch_metrics(old, rollout, mask, cap, distance, turn, after_media=shown).items():
        stats.setdefault(key, []).append(value)
    if not r.vllm_importance_sampling_correction or not corrects_with_sampler(run):
        return advantages
    w = importance_weights(
        old,
        rollout,
        mask,
        r.vllm_importance_sampling_mode,
        r.vllm_importance_sampling_cap,
        r.vllm_importance_sampling_min,
    )
    stats.setdefault("mismatch/is_weight_mean", []).append(float(w[mask.bool()].mean()) if mask.any() else 1.0)
    return (advantages[:, None] if advantages.ndim == 1 else advantages) * w  # [n, T]


def off_policy_masked(run: Run, trajectories, logp, old, mask, advantages, stats):
    """``algorithm.off_policy_mask_threshold`` set: rows with A < 0 whose mean behaviour-to-current log-prob gap
    exceeds it get advantage 0 (``rl.rollout_correction.off_policy_mask``; the behaviour policy is the sampler's
    log-probs when it returned them, else the old policy, as TRL). Logs the masked share."""
    threshold = run.cfg.algorithm.off_policy_mask_threshold
    if threshold is None:
        return advantages
    behaviour = old
    if corrects_with_sampler(run) and trajectories and all(t.rollout_logprobs is not None for t in trajectories):
        rollout = pad_stack([t.rollout_logprobs for t in trajectories], 0.0, torch.float32)
        behaviour = _to_width(rollout, old.shape[1]).to(old.device)
    keep = off_policy_mask(advantages, logp, behaviour, mask, threshold)  # [n]
    stats.setdefault("off_policy/masked_share", []).append(float(1 - keep.mean()) if keep.numel() else 0.0)
    return advantages * (keep if advantages.ndim == 1 else keep[:, None])


def corrects_with_sampler(run: Run) -> bool:
    """Whether the sampler's log-probs act on the update (importance weights, the off-policy mask's behaviour
    policy): always with a vLLM engine; with HF generation (``rollout.hf_sampler_logprobs``, which records them
    for the mismatch metrics) only when ``rollout.hf_importance_sampling_correction`` asks, or when they come
    from an older policy (``rollout.async_generation``: the behaviour policy of each token is its version's)."""
    r = run.cfg.rollout
    return run.rollout_backend is not None or r.hf_importance_sampling_correction or r.async_generation


def _to_width(x: torch.Tensor, width: int) -> torch.Tensor:
    if x.shape[1] >= width:
        return x[:, :width]
    return torch.nn.functional.pad(x, (0, width - x.shape[1]))


def _turn_index(t) -> torch.Tensor:
    """[T] the 0-based assistant turn each token belongs to (0 outside assistant turns)."""
    out = torch.zeros(t.token_ids.numel(), dtype=torch.long)
    for k, turn in enumerate([u for u in t.turns if u.role == "assistant"]):
        out[turn.start : turn.end] = k
    return out


def sampling_options(run: Run) -> dict[str, Any]:
    """What makes the trainer's log-probs those of the sampler: ``rollout.temperature`` (1 for greedy) and
    the vision specials that generation suppresses. Like TRL, top-p / top-k truncation is not applied."""
    temperature = run.cfg.rollout.temperature
    return {
        "temperature": temperature if temperature > 0 else 1.0,
        "suppressed": suppressed_token_ids(run.processor.tokenizer),
    }


def _skip_update(run: Run, kind: str) -> dict[str, float]:
    """A NaN/inf loss or gradient on any process: every process drops this step's update, counts it and
    keeps going."""
    run.counters.nan_steps += 1
    sync_gradients(run.model, True)  # a micro-batch before the last may have turned it off
    run.event(kind, step=run.step)
    run.optimizer.zero_grad(set_to_none=True)
    return {"loss": float("nan"), "skipped_update": 1.0}


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
