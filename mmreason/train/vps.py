"""GRPO-VPS probes (mmreason/rl/losses/vps.py): before the update, each single-turn completion is cut into segments
and the reference answer is appended at every boundary; one forward per boundary reads log P(answer | prefix)
under the sampling policy. The per-token segment progress goes to the loss as ``segment_progress``
(``SegmentProgress``, the method's provider: ``mmreason/rl/providers.py``); the number of probe forwards is logged
(``vps/probe_forwards``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from mmreason.rl.losses.vps import progress_per_token, segment_bounds
from mmreason.rl.providers import Provider
from mmreason.rollout.forward import collate
from mmreason.types import Sample, Trajectory

if TYPE_CHECKING:
    from mmreason.train.loss_extras import UpdateView
    from mmreason.train.setup import Run


def answer_tokens(run: Run, sample: Sample) -> torch.Tensor:
    """Tokenize the reference answer as the pack writes SFT targets (no turn end: the probe reads the answer)."""
    return run.processor.tokenizer(run.pack.target_text(sample), add_special_tokens=False, return_tensors="pt")[
        "input_ids"
    ][0]


def probes_of(t: Trajectory, answer: torch.Tensor, ends: list[int]) -> list[Trajectory]:
    """Build one probe per boundary (0, then each segment end): prompt + completion[:b] + answer, trained mask on the
    answer."""
    prompt, completion = t.token_ids[: t.prompt_length], t.token_ids[t.prompt_length :]
    types = t.mm_token_type_ids if t.mm_token_type_ids is not None else torch.zeros_like(t.token_ids)
    out: list[Trajectory] = []
    for b in [0, *ends]:
        ids = torch.cat([prompt, completion[:b], answer])
        mask = torch.zeros_like(ids)
        mask[ids.numel() - answer.numel() :] = 1
        mm = torch.cat([types[: t.prompt_length], torch.zeros(b + answer.numel(), dtype=types.dtype)])
        out.append(
            Trajectory(t.sample_id, t.group_id, ids, mask, t.prompt_length, "", mm_token_type_ids=mm, visual=t.visual)
        )
    return out


class SegmentProgress(Provider):
    """The trainer side of GRPO-VPS (``segment_progress``): before the update, each mini-batch's per-token
    segment progress ``[n, T]`` from the probes' forwards under the sampling policy. It keeps nothing between
    steps. ``view`` is the update's (``train/loss_extras.UpdateView``): the run, the mini-batches, the kept
    rows' samples and the update's forward (``view.forward(batch, trajectories)``)."""

    provides: ClassVar[tuple[str, ...]] = ("segment_progress",)
    CUT = {"segmenter": "newline", "segment_tokens": 16, "max_segments": 8}

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.cut = {**self.CUT, **{k: v for k, v in self.options.items() if k in self.CUT}}
        self.progress: list[torch.Tensor] = []

    def before_update(self, view: UpdateView) -> dict[str, float]:
        run, forwards = view.run, 0
        self.progress = []
        for mb in view.minibatches:
            progress = torch.zeros(len(mb.trajectories), mb.inputs.input_ids.shape[1])
            for k, (row, t) in enumerate(zip(mb.rows, mb.trajectories)):
                got = self._probe(view, t, view.samples[row])
                if got is not None:
                    progress[k, t.prompt_length : t.prompt_length + got.numel()] = got
                    forwards += len(self._ends) + 1
            self.progress.append(progress.to(run.device))
        return {"vps/probe_forwards": float(forwards)}

    def _probe(self, view: UpdateView, t: Trajectory, sample: Sample) -> torch.Tensor | None:
        """Return the progress of each completion token of ``t`` (None: an episode, or no segment boundary)."""
        if any(u.role == "observation" for u in t.turns):
            return None  # an episode: observations are not the model's segments
        tok = view.run.processor.tokenizer
        completion = t.token_ids[t.prompt_length :].tolist()
        self._ends = segment_bounds(["\n" in tok.decode([c]) for c in completion], **self.cut)
        if not self._ends:
            return None
        probes = probes_of(t, answer_tokens(view.run, sample), self._ends)
        batch = collate(probes, tok.pad_token_id).to(view.run.device)
        lp = view.forward(batch, probes)  # [S + 1, T'] on the answer tokens
        q = (lp * batch.action_mask).sum(-1).tolist()
        return progress_per_token(q, self._ends, len(completion))

    def inputs(self, k: int) -> dict[str, Any]:
        return {"segment_progress": self.progress[k]}

    def after_update(self, entropy: float | None) -> None:
        self.progress = []
