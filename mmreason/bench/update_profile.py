"""`mmreason bench update-throughput --profile`: where the policy update's time goes, part by part, against the
machine's own measured matmul rate.

One group's update (the shared-prefix path the trainer takes) is timed part by part with forward hooks on the
model's modules: the vision tower, the prompt's pass through the text layers (the prefix), the completions'
pass (completion layers), the LM head over the vocabulary on completion positions and the fp32 log-softmax
(``rl.lm_head``: the head's matmul is timed alone at the same shape, the rest of that call is the
log-softmax), then backward and the optimizer step. Each part's FLOPs are counted from the shapes (2 per
multiply-add; backward is twice the forward's matmuls, plus one more LM-head matmul that the chunked path
recomputes), and the achieved rate is set against the machine's matmul rate in the same dtype, measured here on
square matmuls (``matmul_rate``). A second table splits one profiled step's CPU time by operator kind
(matmuls, attention, softmax and its exponentials, copies and casts, the rest), which is what bounds the
update when its matmuls are not.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from mmreason import rl
from mmreason.rollout import head as rollout_head
from mmreason.rollout import shared_prefix as sp
from mmreason.types import Trajectory

if TYPE_CHECKING:
    from rich.console import Console
    from torch.utils.hooks import RemovableHandle

    from mmreason.bench.update_throughput import Workload

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm")
KINDS = {
    "matmul": MATMUL_OPS,
    "attention": ("scaled_dot_product", "attention"),
    "softmax / exp / logsumexp": ("softmax", "logsumexp", "aten::exp", "log_softmax"),
    "copies and casts": ("aten::copy_", "aten::_to_copy", "aten::cat", "aten::clone", "aten::contiguous"),
    "optimizer (foreach / fused AdamW)": ("_foreach", "_fused_adam"),
}


def matmul_rate(dtype: torch.dtype, size: int = 1024, repeats: int = 5) -> float:
    """The machine's matmul rate in FLOP/s for ``size`` x ``size`` matrices of ``dtype`` (median of ``repeats``)."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=g).to(dtype) for _ in range(2))
    a @ b  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(4):
            a @ b
        times.append((time.perf_counter() - t) / 4)
    return 2 * size**3 / statistics.median(times)


class _Timer:
    """Wall seconds spent inside the hooked modules, per label (one label may be entered several times)."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self._start: dict[str, float] = {}

    def hook(self, module: torch.nn.Module, label: str | Callable[[], str]) -> list[RemovableHandle]:
        def pre(_m: torch.nn.Module, _args: Any) -> None:
            self._start[label() if callable(label) else label] = time.perf_counter()

        def post(_m: torch.nn.Module, _args: Any, _out: Any) -> None:
            name = label() if callable(label) else label
            self.seconds[name].append(time.perf_counter() - self._start.pop(name))

        return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


@contextmanager
def _timed_logprobs(timer: _Timer) -> Iterator[None]:
    """Time ``rl.lm_head.logprobs_from_hidden`` as the forward path calls it, from ``rollout.head`` (head +
    log-softmax)."""

    original = rollout_head.logprobs_from_hidden

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = original(*args, **kwargs)
        timer.seconds["lm head + log-softmax"].append(time.perf_counter() - t)
        return out

    rollout_head.logprobs_from_hidden = timed
    try:
        yield
    finally:
        rollout_head.logprobs_from_hidden = original


def profile_update(
    model: Any,
    trajectories: list[Trajectory],
    pad: int,
    optimizer: torch.optim.Optimizer,
    workload: Workload,
    *,
    steps: int = 3,
) -> dict[str, Any]:
    """Median seconds and FLOPs per part of the shared-prefix update of one group (see the module doc)."""

    text = model.model.language_model
    calls = {"n": 0}
    timer = _Timer()
    handles = timer.hook(model.model.visual, "vision tower")
    handles += timer.hook(text, lambda: "prefix (prompt pass)" if calls["n"] % 2 == 0 else "completion layers")
    handles.append(text.register_forward_hook(lambda *_: calls.__setitem__("n", calls["n"] + 1)))
    width = max(int(t.token_ids.numel()) for t in trajectories)
    advantages = torch.linspace(-1, 1, len(trajectories))
    mask = torch.zeros(len(trajectories), width)
    for i, t in enumerate(trajectories):
        mask[i, : t.token_ids.numel()] = t.action_mask
    rows: list[dict[str, float]] = []
    try:
        with _timed_logprobs(timer):
            for step in range(steps + 1):
                timer.seconds.clear()
                t0 = time.perf_counter()
                logp, ent = sp.shared_prefix_logprobs(model, trajectories, width, pad, True)
                loss = rl.policy_loss("clipped", logp, logp.detach(), advantages, mask).loss
                t1 = time.perf_counter()
                loss.backward()
                t2 = time.perf_counter()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                t3 = time.perf_counter()
                if step:  # the first is a warm-up
                    rows.append(
                        {k: sum(v) for k, v in timer.seconds.items()}
                        | {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2}
                    )
    finally:
        for h in handles:
            h.remove()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    return _parts(model, workload, med, len(trajectories))


def _head_matmul_seconds(model: Any, tokens: int, repeats: int = 5) -> float:
    head = model.get_output_embeddings()
    h = torch.randn(tokens, head.weight.shape[1], dtype=head.weight.dtype)
    with torch.no_grad():
        head(h)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            head(h)
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def _parts(model: Any, w: Workload, med: dict[str, float], g: int) -> dict[str, Any]:
    cfg = model.config.text_config
    d, layers, vocab = cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size
    visual = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    body = sum(p.numel() for p in model.model.language_model.layers.parameters())
    p, c = w.prompt_length, w.completion_len
    m = g * c  # completion tokens: the LM head's rows
    attn_prefix = 2 * layers * d * p * p  # QK^T and AV, causal (half of 2 x 2 x d x p^2)
    attn_completion = g * 4 * layers * d * c * (p + c / 2)
    fwd = {
        "vision tower": 2 * visual * w.patches,
        "prefix (prompt pass)": 2 * body * p + attn_prefix,
        "completion layers": 2 * body * m + attn_completion,
        "lm head": 2 * vocab * d * m,
    }
    head_s = _head_matmul_seconds(model, m)
    fused = med.get("lm head + log-softmax", 0.0)
    seconds = {
        "vision tower": med.get("vision tower", 0.0),
        "prefix (prompt pass)": med.get("prefix (prompt pass)", 0.0),
        "completion layers": med.get("completion layers", 0.0),
        "lm head": min(head_s, fused),
        "log-softmax, entropy (fp32)": max(fused - head_s, 0.0),
    }
    seconds["forward, other"] = max(med["forward"] - sum(seconds.values()), 0.0)
    flops = dict(fwd) | {"log-softmax, entropy (fp32)": 0.0, "forward, other": 0.0}
    matmul_fwd = sum(fwd.values())
    seconds |= {"backward": med["backward"], "optimizer step": med["optimizer"]}
    flops |= {"backward": 2 * matmul_fwd + fwd["lm head"], "optimizer step": 0.0}
    return {
        "seconds": seconds,
        "flops": flops,
        "update_s": med["forward"] + med["backward"],
        "update_flops": 3 * matmul_fwd + fwd["lm head"],
        "step_s": med["forward"] + med["backward"] + med["optimizer"],
    }


def operator_shares(
    model: torch.nn.Module, trajectories: list[Trajectory], pad: int, optimizer: torch.optim.Optimizer
) -> dict[str, float]:
    """One profiled update step's self CPU time split by operator kind (``KINDS``), in seconds."""
    from torch.profiler import ProfilerActivity, profile

    width = max(int(t.token_ids.numel()) for t in trajectories)
    mask = torch.zeros(len(trajectories), width)
    for i, t in enumerate(trajectories):
        mask[i, : t.token_ids.numel()] = t.action_mask
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        logp, _ = sp.shared_prefix_logprobs(model, trajectories, width, pad, True)
        rl.policy_loss("clipped", logp, logp.detach(), torch.linspace(-1, 1, len(trajectories)), mask).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    shares: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        kind = next((k for k, names in KINDS.items() if any(n in event.key for n in names)), "other")
        shares[kind] += event.self_cpu_time_total / 1e6
    return dict(shares)


def print_profile(console: Console, r: dict[str, Any], workload: Workload, steps: int = 3) -> None:
    """The part table and the operator table of one ``bench_update`` result's model (its dtype), with the
    machine's measured matmul rate in that dtype."""
    from rich.table import Table

    model, dtype = r["model"], next(r["model"].parameters()).dtype
    rate = matmul_rate(dtype)
    parts = profile_update(model, r["trajectories"], r["pad"], r["optimizer"], workload, steps=steps)
    table = Table(
        title=f"update by part, {r['dtype']} (matmul rate of this machine in {r['dtype']}: "
        f"{rate / 1e9:,.0f} GFLOP/s, 1024 x 1024)"
    )
    for col in ("part", "seconds", "share", "GFLOP", "GFLOP/s", "of the matmul rate"):
        table.add_column(col, justify="left" if col == "part" else "right")
    total = parts["step_s"]
    for name, s in parts["seconds"].items():
        f = parts["flops"][name]
        table.add_row(
            name,
            f"{s:.3f}",
            f"{s / total:.0%}",
            f"{f / 1e9:.2f}" if f else "-",
            f"{f / s / 1e9:,.1f}" if f and s else "-",
            f"{f / s / rate:.0%}" if f and s else "-",
        )
    update = parts["update_flops"] / parts["update_s"]
    table.add_row(
        "update (forward + backward)",
        f"{parts['update_s']:.3f}",
        "",
        f"{parts['update_flops'] / 1e9:.2f}",
        f"{update / 1e9:,.1f}",
        f"{update / rate:.0%}",
    )
    console.print(table)
    shares = operator_shares(model, r["trajectories"], r["pad"], r["optimizer"])
    ops = Table(title=f"one update step's CPU time by operator kind, {r['dtype']} (torch.profiler, self time)")
    ops.add_column("kind")
    ops.add_column("seconds", justify="right")
    ops.add_column("share", justify="right")
    whole = sum(shares.values())
    for kind, s in sorted(shares.items(), key=lambda kv: -kv[1]):
        ops.add_row(kind, f"{s:.3f}", f"{s / whole:.0%}")
    console.print(ops)
