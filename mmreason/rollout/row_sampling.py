"""Sampling that does not depend on the batch: every row draws from its own seeded random stream.

``RowSeededSampling`` is a ``generate`` logits processor. At each decoding step it turns row ``i``'s scores
into the sampling distribution (temperature, top-k, top-p; tokens already at -inf, such as suppressed
ones, keep probability 0) and draws one token by inverting the row's cumulative distribution at a uniform
number taken from row ``i``'s own ``torch.Generator``. It returns scores that are 0 at the drawn token and
-inf elsewhere, so greedy decoding picks it. Logits that are NaN or +inf (non-finite weights) raise
``NonFiniteLogitsError`` instead of drawing an out-of-range token.

A row's draws therefore depend only on its seed and its own logits: not on which rows share its batch,
on the batch size, on the row's place in the batch, or on the global RNG. Training generates all groups
of a step in one call (row seeds derived from each group's seed by ``row_seeds``) and samples exactly
what per-group calls sample; evaluation seeds each document's row the same way. The generators live on
the CPU, so the uniform numbers are the same on every device.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from mmreason.rollout.generate import GenerationSettings


def row_seeds(seed: int, n: int) -> list[int]:
    """Return the seeds of the ``n`` rows sampled from one seed (a group's G rollouts)."""
    return [
        int.from_bytes(hashlib.sha256(f"{seed}/row/{r}".encode()).digest()[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF
        for r in range(n)
    ]


def sampling_logits(
    scores: torch.Tensor, temperature: float, top_k: int | None = None, top_p: float = 1.0
) -> torch.Tensor:
    """Turn scores [N, V] into [N, V] float32 logits after temperature, top-k and top-p (cut tokens at -inf)."""
    logits = scores.float() / temperature  # [N, V]
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # [N, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)  # [N, V]
        sorted_probs = sorted_logits.softmax(-1)
        # Drop a token when the mass before it already reaches top_p: the smallest prefix is kept.
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p  # [N, V] in sorted order
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(1, order, drop), float("-inf"))
    return logits


def sampling_probabilities(
    scores: torch.Tensor, temperature: float, top_k: int | None = None, top_p: float = 1.0
) -> torch.Tensor:
    """Turn scores [N, V] into [N, V] float32 probabilities after temperature, top-k and top-p."""
    return sampling_logits(scores, temperature, top_k, top_p).softmax(-1)


def picked_logprobs(logits: torch.Tensor, picks: torch.Tensor) -> torch.Tensor:
    """Return, from logits [N, V] (fp32, -inf where cut) and picks [N], the [N] float32 log p of each row's pick under
    softmax(logits): what vLLM reports with ``logprobs_mode="processed_logprobs"``."""
    return logits.gather(1, picks[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)


def inverse_cdf_draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Draw [N] token ids from probs [N, V] and uniforms [N] in [0, 1): row i's first token whose cumulative mass
    exceeds u_i x its total mass (float64; a token of probability 0 is never drawn)."""
    cdf = probs.double().cumsum(-1)  # [N, V]
    total = cdf[:, -1:]  # [N, 1]
    picks = torch.searchsorted(cdf, uniforms.to(cdf)[:, None] * total, right=True)  # [N, 1]
    last = torch.searchsorted(cdf, total.contiguous(), right=False)  # [N, 1] the last token of positive mass
    return torch.minimum(picks, last)[:, 0]


class NonFiniteLogitsError(RuntimeError):
    """The model's logits hold NaN or +inf (or a row has no token of positive probability): nothing can be
    sampled from them, and the weights that gave them are almost surely non-finite."""


def check_finite_distribution(probs: torch.Tensor, position: int) -> None:
    """Raise ``NonFiniteLogitsError`` unless every row of ``probs`` [N, V] is finite with positive mass."""
    total = probs.sum(-1)  # [N]; NaN where any entry is NaN
    bad = ~(torch.isfinite(total) & (total > 0))  # [N]
    if bool(bad.any()):
        rows = bad.nonzero()[:, 0].tolist()
        raise NonFiniteLogitsError(
            f"the model's logits are NaN or infinite at decoding position {position} "
            f"(rows {rows[:8]}{' ...' if len(rows) > 8 else ''}); nothing can be sampled"
        )


class RowSeededSampling:
    """A logits processor: temperature / top-k / top-p sampling with one generator per row.

    scores [N, V] -> [N, V] that is 0 at the drawn token and -inf elsewhere (so greedy picks it).
    With ``record_logprobs`` each step's [N] log-probs of the drawn tokens under the distribution they were
    drawn from (after temperature, top-k, top-p) are appended to ``logprobs`` (``stacked_logprobs``).
    """

    # decoding steps whose uniform numbers are drawn (and moved to the device) at once
    block = 64

    def __init__(self, seeds: Sequence[int], settings: GenerationSettings, record_logprobs: bool = False) -> None:
        self.settings = settings  # GenerationSettings: temperature, top_k, top_p
        self.logprobs: list[torch.Tensor] | None = [] if record_logprobs else None
        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self._drawn = torch.zeros(len(self.generators), 0, dtype=torch.float64)  # [N, block]
        self._next = 0
        self._position = 0

    def uniforms(self) -> torch.Tensor:
        """Return [N] float64: the next number of each row's stream (one per row and decoding step)."""
        if self._next == self._drawn.shape[1]:
            self._drawn = torch.stack(
                [torch.rand(self.block, generator=g, dtype=torch.float64) for g in self.generators]
            )
            self._next = 0
        self._next += 1
        return self._drawn[:, self._next - 1]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.shape[0] != len(self.generators):
            raise ValueError(f"row-seeded sampling: {scores.shape[0]} rows but {len(self.generators)} seeds")
        s = self.settings
        logits = sampling_logits(scores, s.temperature, s.top_k, s.top_p)  # [N, V] fp32
        probs = logits.softmax(-1)
        check_finite_distribution(probs, self._position)
        self._position += 1
        picks = inverse_cdf_draw(probs, self.uniforms())  # [N]
        if self.logprobs is not None:
            self.logprobs.append(picked_logprobs(logits, picks))
        out = torch.full_like(scores, float("-inf"))
        return out.scatter(1, picks[:, None], 0.0)


class GreedyLogprobs:
    """A logits processor for greedy decoding that changes nothing: it appends each step's [N] log-probs of
    the argmax token under softmax(scores) in fp32 (no temperature: vLLM's greedy ``processed_logprobs``, and
    the trainer's temperature of 1 for greedy) to ``logprobs``."""

    def __init__(self) -> None:
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        logits = scores.float()
        self.logprobs.append(picked_logprobs(logits, logits.argmax(-1)))
        return scores


def stacked_logprobs(steps: list[torch.Tensor], n: int) -> torch.Tensor:
    """Stack a recorder's per-step [N] log-probs into [N, L] (L = decoding steps; [N, 0] when none)."""
    return torch.stack(steps, dim=1).cpu() if steps else torch.zeros(n, 0)


class SuppressTokens:
    """A logits processor: the given token ids at -inf (never sampled, never picked greedily)."""

    def __init__(self, token_ids: Sequence[int]) -> None:
        self.token_ids = torch.as_tensor(list(token_ids), dtype=torch.long)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.token_ids.numel():
            return scores
        return scores.index_fill(-1, self.token_ids.to(scores.device), float("-inf"))
