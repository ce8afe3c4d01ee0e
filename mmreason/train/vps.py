"""GRPO-VPS probes (mmreason/rl/losses/vps.py): before the update, each single-turn completion is cut into segments
and the reference answer is appended at every boundary; one forward per boundary reads log P(answer | prefix)
under the sampling policy. The per-token segment progress goes to the loss as ``segment_progress``; the number of
probe forwards is logged (``vps/probe_forwards``)."""

from __future__ import annotations

import torch

from mmreason import rl
from mmreason.rl.losses.vps import progress_per_token, segment_bounds
from mmreason.rollout.forward import collate
from mmreason.types import Trajectory


def answer_tokens(run, sample) -> torch.Tensor:
    """The reference answer as the pack writes SFT targets, tokenized (no turn end: the probe reads the answer)."""
    return run.processor.tokenizer(run.pack.target_text(sample), add_special_tokens=False, return_tensors="pt")[
        "input_ids"
    ][0]


def probes_of(t: Trajectory, answer: torch.Tensor, ends: list[int]) -> list[Trajectory]:
    """One probe per boundary (0, then each segment end): prompt + completion[:b] + answer, trained mask on the answer."""
    prompt, completion = t.token_ids[: t.prompt_length], t.token_ids[t.prompt_length :]
    types = t.mm_token_type_ids if t.mm_token_type_ids is not None else torch.zeros_like(t.token_ids)
    out = []
    for b in [0, *ends]:
        ids = torch.cat([prompt, completion[:b], answer])
        mask = torch.zeros_like(ids)
        mask[ids.numel() - answer.numel() :] = 1
        mm = torch.cat([types[: t.prompt_length], torch.zeros(b + answer.numel(), dtype=types.dtype)])
        out.append(
            Trajectory(t.sample_id, t.group_id, ids, mask, t.prompt_length, "", mm_token_type_ids=mm, visual=t.visual)
        )
    return out


def segment_progress(run, policy, minibatches, samples_of_rows, stats, *, logprobs) -> None:
    """Set ``mb.segment_progress`` [n, T] on each mini-batch (nothing unless the loss reads ``segment_progress``).
    ``logprobs(run, model, batch, trajectories)`` is the update's forward (``update.sequence_logprobs``)."""
    a = run.cfg.algorithm
    fn = rl.POLICY_LOSSES.get(a.policy_loss)
    if "segment_progress" not in rl.contract_of(fn).takes:
        return
    opts = {k: v for k, v in a.loss_options.items() if k in ("segmenter", "segment_tokens", "max_segments")}
    cut = {"segmenter": "newline", "segment_tokens": 16, "max_segments": 8, **opts}
    tok, pad, forwards = run.processor.tokenizer, run.processor.tokenizer.pad_token_id, 0
    for mb in minibatches:
        width = mb.inputs.input_ids.shape[1]
        progress = torch.zeros(len(mb.trajectories), width)
        for k, (row, t) in enumerate(zip(mb.rows, mb.trajectories)):
            if any(u.role == "observation" for u in t.turns):
                continue  # an episode: observations are not the model's segments
            completion = t.token_ids[t.prompt_length :].tolist()
            ends = segment_bounds(["\n" in tok.decode([c]) for c in completion], **cut)
            if not ends:
                continue
            probes = probes_of(t, answer_tokens(run, samples_of_rows[row]), ends)
            batch = collate(probes, pad).to(run.device)
            lp = logprobs(run, policy, batch, probes)[0]  # [S + 1, T'] on the answer tokens
            forwards += len(probes)
            q = (lp * batch.action_mask).sum(-1).tolist()
            progress[k, t.prompt_length : t.prompt_length + len(completion)] = progress_per_token(
                q, ends, len(completion)
            )
        mb.segment_progress = progress.to(run.device)
    stats.setdefault("vps/probe_forwards", []).append(float(forwards))
