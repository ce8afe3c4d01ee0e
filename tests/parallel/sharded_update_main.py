"""The sharded (FSDP2) update's memory savers, checked on every process of a 2-process gloo launch of
configs/accelerate/fsdp_cpu.yaml. tests/parallel/test_sharded_update.py runs it (arguments: an output folder,
then config overrides); each process writes ``rank<N>.json`` with what it saw:

- ``head``: the sharded policy's log-probs and entropies of this process's rows, and every parameter's
  gradient (all-gathered), against a whole unsharded copy of the model over both processes' rows (FSDP2
  averages the two losses' gradients); the sizes of the tensors autograd saved for backward (no ``[.., V]``);
- ``reference``: the reference model is sharded (each process holds a shard of its parameters, DTensors
  again after every forward) and its log-probs equal the whole copy's;
- ``rollouts``: a rollout engine that generates (here one that records the policy's parameters and returns
  no rows, in place of vLLM) sees the policy still sharded;
- ``reshard``: every unit's own ``reshard_after_forward`` is back after ``gathered()``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


class RecordingEngine:
    """A rollout engine that notes whether every policy parameter is still a shard when asked to generate."""

    is_rollout_backend = True

    def __init__(self, model):
        self.model = model
        self.sharded: list[bool] = []

    def generate_groups(self, prompts, *args, **kwargs):
        self.sharded.append(all(hasattr(p, "to_local") for p in self.model.parameters()))
        return []

    def sync_weights(self, model, *args, **kwargs) -> float:
        return 0.0

    def close(self) -> None:
        pass


def rows(vocab: int) -> list:
    """Four trajectories (two groups of two) of random text tokens, 6-token prompts, completions of 9-14."""
    from mmreason.types import Trajectory

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(4):
        p, c = 6, 9 + i + (i % 2) * 2
        ids = torch.randint(0, vocab - 8, (p + c,), generator=g)
        mask = torch.cat([torch.zeros(p), torch.ones(c)])
        out.append(Trajectory("s", i // 2, ids, mask, p, "", mm_token_type_ids=torch.zeros(p + c, dtype=torch.long)))
    return out


def saved_sizes(fn):
    """(fn's result, the shapes of the tensors autograd saved for backward while it ran)."""
    shapes: list[list[int]] = []

    def pack(t):
        shapes.append(list(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, shapes


def loss_of(lp, ent, mask):
    w = torch.linspace(-1.0, 1.0, lp.shape[1])[None]
    return (lp * w * mask).sum() + 0.1 * (ent * mask).sum()


def check_head(run, whole, mine, theirs, pad, options) -> dict:
    from mmreason.rollout.forward import collate, token_logprobs

    rank = run.accelerator.process_index
    batch = collate(mine, pad)
    (lp, ent), shapes = saved_sizes(lambda: token_logprobs(run.model, batch, True, **options))
    loss_of(lp, ent, batch.action_mask).backward()
    grads = {}
    for name, p in run.model.named_parameters():
        if p.grad is not None:
            grads[name] = p.grad.full_tensor()
    total, whole_lp = 0.0, None
    for r, part in enumerate(theirs):
        b = collate(part, pad)
        wl, we = token_logprobs(whole, b, True, **options)
        total = total + loss_of(wl, we, b.action_mask) / len(theirs)
        if r == rank:
            whole_lp, whole_ent = wl.detach(), we.detach()
    total.backward()
    wgrads = {n: p.grad for n, p in whole.named_parameters() if p.grad is not None}
    vocab = whole.get_output_embeddings().weight.shape[0]
    (_, _), logits_shapes = saved_sizes(lambda: token_logprobs(whole, batch, True, chunked=False, **options))
    return {
        "lp_diff": float((lp.detach() - whole_lp).abs().max()),
        "ent_diff": float((ent.detach() - whole_ent).abs().max()),
        "trained_tokens": int(batch.action_mask.sum()),
        "grad_names_equal": sorted(grads) == sorted(wgrads),
        "grad_diff": max(float((grads[n] - wgrads[n]).abs().max()) for n in wgrads),
        "grad_scale": max(float(wgrads[n].abs().max()) for n in wgrads),
        "vocab_saved": sum(s[-1] == vocab for s in shapes if s),
        "vocab_saved_logits_path": sum(s[-1] == vocab for s in logits_shapes if s),
    }


def check_reference(run, whole, batch, options) -> dict:
    from mmreason.parallel.sharding import is_sharded
    from mmreason.rollout.forward import token_logprobs

    ref = run.ref_model
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel() for p in ref.parameters())
    with torch.no_grad():
        lp, _ = token_logprobs(ref, batch, **options)
        expected, _ = token_logprobs(whole, batch, **options)
    return {
        "sharded": is_sharded(ref),
        "local_share": local / sum(p.numel() for p in whole.parameters()),
        "shards_after_forward": all(hasattr(p, "to_local") for p in ref.parameters()),
        "lp_diff": float((lp - expected).abs().max()),
    }


def check_reshard(run) -> dict:
    from torch.distributed.fsdp import FSDPModule

    from mmreason.parallel.sharding import gathered, reshards_after_forward

    units = [m for m in run.model.modules() if isinstance(m, FSDPModule)]
    units[1].set_reshard_after_forward(False, recurse=False)  # one unit set otherwise by hand
    before = [reshards_after_forward(u) for u in units]
    with gathered(run.model):
        pass
    return {"before": before, "after": [reshards_after_forward(u) for u in units]}


def main(out: str, overrides: list[str]) -> None:
    from mmreason.config import load_config
    from mmreason.models.loading import ModelConfig, load_model
    from mmreason.parallel.shutdown import finish_processes
    from mmreason.rollout.forward import collate
    from mmreason.train.config import TrainConfig
    from mmreason.train.setup import setup_run
    from mmreason.train.step import get_rollouts
    from mmreason.train.timing import PhaseTimes

    run = setup_run(load_config(TrainConfig, None, overrides), with_rewards=False, verbose=False)
    rank = run.accelerator.process_index
    whole = load_model(ModelConfig(name_or_path=run.cfg.model.name_or_path, dtype="float32"))
    whole.train()
    run.model.train()
    pad = run.processor.tokenizer.pad_token_id
    trajectories = rows(whole.get_output_embeddings().weight.shape[0])
    theirs = [trajectories[:2], trajectories[2:]]
    options = {"temperature": 0.7, "suppressed": [pad]}
    report = {"reference": check_reference(run, whole, collate(theirs[rank], pad), options)}
    report["head"] = check_head(run, whole, theirs[rank], theirs, pad, options)
    engine = RecordingEngine(run.model)
    run.rollout_backend = engine
    get_rollouts(run, 1, PhaseTimes())
    report["rollouts"] = {"sharded_while_generating": engine.sharded}
    run.rollout_backend = None
    report["reshard"] = check_reshard(run)
    Path(out, f"rank{rank}.json").write_text(json.dumps(report))
    finish_processes(run.accelerator)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
