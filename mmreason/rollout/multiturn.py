"""Multi-turn rollouts: assistant turns interleaved with environment observations.

Tokens are appended, never re-tokenized: the sampled ids of every assistant turn are kept exactly
(action_mask 1) and each observation is rendered as a user turn by the checkpoint's chat template and encoded by
the processor (visual pads expanded, action_mask 0). The trajectory ends when the model stops without
a tool call, the environment says done, ``max_turns`` is reached, or the context would exceed its limit.
An exception in ``Environment.step``, or a step running past ``step_timeout_s`` (``deadline.py``), ends the
episode with ``Trajectory.end`` an ``EpisodeEnd`` of reason "environment error" (the trainer counts it), never the
run. An episode cut by a limit (an observation over ``max_observation_tokens``, a full context, an observation whose
media would not reach the model) says so in ``end``;
``episode_context`` is the context that no episode within the limits can fill.

Episodes are played together (``run_episodes``): each turn, all live episodes sample their next assistant turn
in one batched ``generate`` call, then each environment answers its own. Every episode samples from its own
seeded stream, so what it draws does not depend on which episodes share the call.

``model`` may be a rollout engine (``is_rollout_backend``, e.g. the vLLM backend) instead of an HF model:
each turn's contexts are then its requests, token ids and all the media shown so far (the prompt's, then
each observation's images and video frames with their metadata), so the engine sees exactly the trainer's
context; its sampled tokens' log-probs are kept as the trajectory's ``rollout_logprobs``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from mmreason.media import load_image
from mmreason.rollout.chat_turns import next_turn
from mmreason.rollout.deadline import DEFAULT_STEP_TIMEOUT_S, call_with_deadline
from mmreason.rollout.environment import Environment, Observation
from mmreason.rollout.generate import (
    GenerationSettings,
    cut_at_eos,
    eos_token_ids,
    group_seed,
    sample_rows_scored,
)
from mmreason.rollout.prompts import VISUAL_KEYS, PromptInputs, encode
from mmreason.rollout.row_sampling import row_seeds
from mmreason.rollout.visibility import UnseenMedia, check_encoded, check_rendered
from mmreason.types import EndReason, EpisodeEnd, Trajectory, Turn

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, ProcessorMixin

# Asynchronous generation's hold on the engine for one turn's sampling call (train/async_rollouts.py): entered
# around each turn's call, it yields the policy version the engine holds during it
TurnGate = Callable[[], AbstractContextManager[int]]
UNSEEN_MEDIA: EndReason = "unseen media"  # an observation's media would not reach the model
ENVIRONMENT_ERROR: EndReason = "environment error"  # the environment raised or ran past its time limit


def ended_by_fault(t: Trajectory) -> bool:
    """Tell whether the environment raised or ran past its time limit during this episode (a counted fault)."""
    return t.end is not None and t.end.fault


def ended_by_limit(t: Trajectory) -> bool:
    """Tell whether a limit (an observation over ``max_observation_tokens``, a full context, unseen media) cut this
    episode."""
    return t.end is not None and not t.end.fault


class EnvironmentStartError(ValueError):
    """``Environment.reset`` raised or ran past the step time limit: no episode of that sample can run."""


def observation_content(obs: Observation) -> list[dict]:
    """Turn an observation into chat-template content parts: its images, its videos, then its text."""
    return (
        [{"type": "image"}] * len(obs.images)
        + [{"type": "video"}] * len(obs.videos)
        + [{"type": "text", "text": obs.text}]
    )


def observation_text(processor: ProcessorMixin, obs: Observation, closed: bool) -> str:
    """Render the tokens between two assistant turns, as the checkpoint's chat template renders them."""
    eos = processor.tokenizer.eos_token or ""
    return next_turn(processor, observation_content(obs), closed, eos)


ImageBudget = tuple[int | None, int | None]  # (min_pixels, max_pixels) of the run's images


def fit_images(obs: Observation, budget: ImageBudget | None) -> Observation:
    """Return ``obs`` with each image over the run's ``max_pixels`` resized into the budget as a prompt's images are
    (``load_image``: aspect kept, sides multiples of 28); images within it are left as the environment made them."""
    high = budget[1] if budget else None
    if not high or not any(im.width * im.height > high for im in obs.images):
        return obs
    low = budget[0] if budget else None
    fitted = [
        load_image(im, max_pixels=high, min_pixels=low) if im.width * im.height > high else im for im in obs.images
    ]
    return replace(obs, images=fitted)


def encode_observation(
    processor: ProcessorMixin, obs: Observation, closed: bool, sample_id: str = ""
) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Encode an observation's tokens; raise ``UnseenMedia`` when its images / videos would not reach the model."""
    text = observation_text(processor, obs, closed)
    check_rendered(processor, text, len(obs.images), len(obs.videos), sample_id=sample_id)
    out = encode(processor, text, obs.images, obs.videos, obs.video_metadata)
    ids = out["input_ids"][0]
    check_encoded(processor, ids, out, len(obs.images), len(obs.videos), sample_id=sample_id)
    types = out.get("mm_token_type_ids")
    types = types[0].long() if types is not None else torch.zeros_like(ids)
    return ids, types, {k: out[k] for k in VISUAL_KEYS if k in out}


@dataclass
class EpisodeStart:
    """One episode to play: its prompt, a fresh environment, and where its trajectory belongs. ``index`` is
    its rollout number within the group and ``key`` the sample key (default the sample id): together they seed
    its sampling, so an episode draws the same tokens whichever episodes share its ``generate`` calls."""

    prompt: PromptInputs
    env: Environment
    group_id: int
    index: int = 0
    key: str | None = None

    def turn_seed(self, seed: int, step: int, turn: int) -> int:
        """Return the sampling seed of this episode's row in turn ``turn``'s generate call."""
        return row_seeds(group_seed(seed, step, f"{self.key or self.prompt.sample.id}#{self.index}", turn), 1)[0]


@dataclass
class _Episode:
    """A live episode: the context so far (prompt, assistant turns, observations) and what it recorded."""

    start: EpisodeStart
    ids: torch.Tensor
    types: torch.Tensor
    mask: torch.Tensor
    visual: list[dict[str, torch.Tensor]]
    env_seconds: float
    turns: list[Turn] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)
    truncated: bool = False
    ended: EpisodeEnd | None = None
    finished: bool = False
    # an observation's media that would not have reached the model (visibility)
    unseen: dict | None = None
    # the decoded media of the context in order (prompt, then observations), for an engine's own processor
    images: list = field(default_factory=list)
    videos: list = field(default_factory=list)
    video_metadata: list = field(default_factory=list)
    # [len(ids)] the engine's log-probs of sampled tokens (0 elsewhere)
    logprobs: torch.Tensor | None = None
    # [len(ids)] the policy version of each sampled token (-1 elsewhere)
    versions: torch.Tensor | None = None

    def shown_images(self) -> list:
        """Return the observations' images the model was actually shown (the context's images past the prompt's)."""
        return self.images[len(self.start.prompt.images) :]

    def context(self) -> PromptInputs:
        return PromptInputs(
            self.start.prompt.sample,
            self.ids,
            self.types,
            _merge_visual(self.visual),
            images=list(self.images),
            videos=list(self.videos),
            video_metadata=list(self.video_metadata),
        )

    def trajectory(self) -> Trajectory:
        # Rewards score the model's own text: observations stand as empty markers (Trajectory.transcript has them)
        completion = "".join(t.text if t.role == "assistant" else "\n<observation></observation>\n" for t in self.turns)
        prompt = self.start.prompt
        return Trajectory(
            sample_id=prompt.sample.id,
            group_id=self.start.group_id,
            token_ids=self.ids,
            action_mask=self.mask,
            prompt_length=prompt.length,
            completion_text=completion,
            truncated=self.truncated,
            turns=self.turns,
            tool_calls=[i for i in self.infos if i],
            mm_token_type_ids=self.types,
            visual=self.visual,
            reward_info={
                "observations": self.infos,
                "observation_images": self.shown_images(),
            },
            rollout_logprobs=self.logprobs,
            end=self.ended,
            env_seconds=self.env_seconds,
            unseen_media=self.unseen,
            token_versions=self.versions,
        )


def run_episodes(
    model: Any,
    processor: ProcessorMixin,
    starts: Sequence[EpisodeStart],
    settings: GenerationSettings,
    *,
    max_turns: int,
    max_context: int,
    seed: int,
    step: int,
    max_observation_tokens: int | None = None,
    step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S,
    with_logprobs: bool = False,
    turn_gate: TurnGate | None = None,
    image_budget: ImageBudget | None = None,
) -> list[Trajectory | EnvironmentStartError]:
    """Play all ``starts`` together: each turn, every live episode samples its next assistant turn in one
    batched ``generate`` call (``sample_rows``; with an engine as ``model``, one engine call), then each
    environment answers its own. In the first turn the
    episodes of one prompt share its encoding (vision tower and prefill) when every prompt has the same count.

    Returns one entry per start, in order: its Trajectory, or the ``EnvironmentStartError`` of an environment
    whose ``reset`` raised or ran past ``step_timeout_s`` (the caller decides what a broken sample costs). An
    observation longer than ``max_observation_tokens`` (text + visual tokens), or one that would overflow
    ``max_context``, ends that episode; so does a ``step`` that raises or runs past ``step_timeout_s`` seconds
    (default 60; None: no limit). A turn ends at EOS or at one of the environment's ``stop_strings`` (one pack
    per call: the first start's), which replace ``settings.stop_strings``. With an engine, or with HF generation
    and ``with_logprobs``, each trajectory carries the sampler's log-probs of its assistant tokens (0 elsewhere).
    ``turn_gate`` (asynchronous generation) is held around each turn's sampling call only, so a weight push can
    land between two turns of an episode (a partial rollout); each trajectory's ``token_versions`` then records
    the version the gate yielded for every sampled token.
    ``image_budget``: the run's (min_pixels, max_pixels); an observation's larger images are fitted into it.
    """
    if starts:
        settings = replace(settings, stop_strings=tuple(getattr(starts[0].env, "stop_strings", ())))
    results: list[Trajectory | EnvironmentStartError | None] = [None] * len(starts)
    episodes: dict[int, _Episode] = {}
    for i, s in enumerate(starts):
        started = time.perf_counter()
        try:
            call_with_deadline(s.env.reset, (s.prompt.sample,), step_timeout_s, what="reset")
        # the sample cannot be played: the caller counts it as a broken sample
        except Exception as exc:
            error = EnvironmentStartError(
                f"sample {s.prompt.sample.id!r}: the environment cannot start: {type(exc).__name__}: {str(exc)[:500]}"
            )
            error.__cause__ = exc
            results[i] = error
            continue
        p = s.prompt
        episodes[i] = _Episode(
            s,
            p.input_ids.clone(),
            p.mm_token_type_ids.clone(),
            torch.zeros_like(p.input_ids),
            [p.visual] if p.visual else [],
            time.perf_counter() - started,
            images=list(p.images),
            videos=list(p.videos),
            video_metadata=list(p.video_metadata),
            logprobs=torch.zeros(p.length) if _is_engine(model) or with_logprobs else None,
            versions=torch.full((p.length,), -1, dtype=torch.long) if turn_gate is not None else None,
        )
    for turn in range(max_turns):
        live = [e for e in episodes.values() if not e.finished]
        if not live:
            break
        with turn_gate() if turn_gate is not None else nullcontext(-1) as version:
            rows = _sample_turn(
                model, processor.tokenizer, live, settings, seed, step=step, turn=turn, with_logprobs=with_logprobs
            )
        for e, (row, logprobs, hf_logprobs) in zip(live, rows):
            _play_turn(
                processor,
                e,
                row,
                settings,
                turn,
                max_turns=max_turns,
                max_context=max_context,
                max_observation_tokens=max_observation_tokens,
                step_timeout_s=step_timeout_s,
                logprobs=logprobs,
                hf_logprobs=hf_logprobs,
                version=version,
                image_budget=image_budget,
            )
    for i, e in episodes.items():
        results[i] = e.trajectory()
        close_environment(e.start.env, step_timeout_s)
    played = [r for r in results if r is not None]
    assert len(played) == len(starts)  # every start has its entry, in order
    return played


def close_environment(env: Environment, timeout_s: float | None) -> None:
    """Call the environment's optional ``close()`` once its episode is over (an environment served over HTTP
    ends its server session); a close that raises or hangs past ``timeout_s`` is ignored."""
    close = getattr(env, "close", None)
    if callable(close):
        try:
            call_with_deadline(close, (), timeout_s, what="close")
        # the trajectory is complete; what the close frees is the env's business
        except Exception:  # noqa: BLE001
            pass


def _is_engine(model: Any) -> bool:
    return bool(getattr(model, "is_rollout_backend", False))


def _sample_turn(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    live: list[_Episode],
    settings: GenerationSettings,
    seed: int,
    *,
    step: int,
    turn: int,
    with_logprobs: bool = False,
) -> list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]:
    """Sample each live episode's next-turn tokens, from one batched generate call: (right-padded row, None, its
    log-probs [L] with ``with_logprobs`` else None), or with an engine (its sampled ids, their log-probs, None), the row
    ending at EOS, a stop string or the limit."""
    by_prompt: dict[int, list[_Episode]] = {}
    for e in live:
        by_prompt.setdefault(id(e.start.prompt), []).append(e)
    sizes = {len(v) for v in by_prompt.values()}
    n = sizes.pop() if turn == 0 and len(sizes) == 1 else 1
    order = [e for group in by_prompt.values() for e in group] if n > 1 else live
    contexts = [group[0].context() for group in by_prompt.values()] if n > 1 else [e.context() for e in live]
    seeds = [e.start.turn_seed(seed, step, turn) for e in order]
    new: list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]
    if _is_engine(model):  # the same contexts, rows and seeds as one engine call
        new = [
            (torch.tensor(ids, dtype=torch.long), torch.tensor(lps, dtype=torch.float32), None)
            for ids, lps, _ in model.sample(contexts, n, settings, seeds)
        ]
    else:
        rows, lps = sample_rows_scored(
            model, tokenizer, contexts, n, settings, seeds=seeds, with_logprobs=with_logprobs
        )  # [len(live), L]
        new = [(row, None, None if lps is None else lps[k]) for k, row in enumerate(rows)]
    row_of = {id(e): r for r, e in enumerate(order)}
    return [new[row_of[id(e)]] for e in live]


def _play_turn(
    processor: ProcessorMixin,
    e: _Episode,
    row: torch.Tensor,
    settings: GenerationSettings,
    turn: int,
    *,
    max_turns: int,
    max_context: int,
    max_observation_tokens: int | None,
    step_timeout_s: float | None,
    logprobs: torch.Tensor | None = None,
    hf_logprobs: torch.Tensor | None = None,
    version: int = -1,
    image_budget: ImageBudget | None = None,
) -> None:
    """Append one sampled assistant turn to ``e``, let its environment answer, and append the observation.
    ``logprobs``: an engine's row (no padding; it stopped at EOS, a stop string or the limit) and its log-probs.
    ``hf_logprobs``: the log-probs of an HF row's positions (the turn kept is a prefix of the row)."""
    tokenizer = processor.tokenizer
    eos = eos_token_ids(tokenizer)
    if logprobs is not None:
        action, truncated = row, not (row.numel() and int(row[-1]) in eos)
    else:
        action, truncated = cut_at_eos(row, eos, tokenizer.pad_token_id)
    text = tokenizer.decode(action, skip_special_tokens=True)
    if logprobs is None and action.numel() and int(action[-1]) == tokenizer.pad_token_id and settings.stop_strings:
        # In a batch, a row that met a stop string is filled with pad while the others go on: not its token
        body = tokenizer.decode(action[:-1], skip_special_tokens=True)
        if any(body.endswith(s) for s in settings.stop_strings):
            action, text = action[:-1], body
    if hf_logprobs is not None:
        logprobs = hf_logprobs[: action.numel()]
    start = int(e.ids.numel())
    e.ids = torch.cat([e.ids, action])
    e.types = torch.cat([e.types, torch.zeros_like(action)])
    e.mask = torch.cat([e.mask, torch.ones_like(action)])
    if e.logprobs is not None:
        e.logprobs = torch.cat([e.logprobs, logprobs if logprobs is not None else torch.zeros(action.numel())])
    if e.versions is not None:
        e.versions = torch.cat([e.versions, torch.full((action.numel(),), version, dtype=torch.long)])
    e.turns.append(Turn("assistant", text, start, int(e.ids.numel())))
    ended_with_eos = action.numel() > 0 and int(action[-1]) in eos
    e.truncated = truncated and not any(text.endswith(s) for s in settings.stop_strings)
    e.finished = True  # unless an observation follows
    stepped = time.perf_counter()
    try:
        # the environment decides what a finished, stopped or cut turn means
        obs = call_with_deadline(e.start.env.step, (text,), step_timeout_s)
    # an environment bug or a hostile action ends this episode, never the run
    except Exception as exc:
        e.ended = EpisodeEnd(ENVIRONMENT_ERROR, f"{type(exc).__name__}: {str(exc)[:500]}")
        return
    finally:
        e.env_seconds += time.perf_counter() - stepped
    e.infos.append(obs.info)
    if obs.done or turn == max_turns - 1:
        return
    try:
        obs = fit_images(obs, image_budget)
    # an image the environment made that cannot be fitted: its fault
    except Exception as exc:  # noqa: BLE001
        e.ended = EpisodeEnd(ENVIRONMENT_ERROR, f"observation image: {type(exc).__name__}: {str(exc)[:500]}")
        return
    try:
        obs_ids, obs_types, obs_visual = encode_observation(processor, obs, ended_with_eos, e.start.prompt.sample.id)
    # the observation's media would not reach the model: the episode ends here
    except UnseenMedia as exc:
        e.ended, e.unseen = EpisodeEnd(UNSEEN_MEDIA, str(exc)), exc.report
        return
    if max_observation_tokens is not None and obs_ids.numel() > max_observation_tokens:
        e.ended = EpisodeEnd(
            "observation too long", f"{obs_ids.numel()} tokens > max_observation_tokens={max_observation_tokens}"
        )
        return
    if e.ids.numel() + obs_ids.numel() + settings.max_new_tokens > max_context:
        e.ended = EpisodeEnd(
            "context full",
            f"{e.ids.numel()} tokens + observation of {obs_ids.numel()} + next turn of "
            f"{settings.max_new_tokens} > max_context={max_context}",
        )
        return
    e.turns.append(Turn("observation", obs.text, int(e.ids.numel()), int(e.ids.numel() + obs_ids.numel())))
    e.ids = torch.cat([e.ids, obs_ids])
    e.types = torch.cat([e.types, obs_types])
    e.mask = torch.cat([e.mask, torch.zeros_like(obs_ids)])
    if e.logprobs is not None:
        e.logprobs = torch.cat([e.logprobs, torch.zeros(obs_ids.numel())])
    if e.versions is not None:
        e.versions = torch.cat([e.versions, torch.full((obs_ids.numel(),), -1, dtype=torch.long)])
    if obs_visual:
        e.visual.append(obs_visual)
    e.images.extend(obs.images)
    e.videos.extend(obs.videos)
    e.video_metadata.extend(obs.video_metadata)
    e.finished = False


def run_episode(
    model: Any,
    processor: ProcessorMixin,
    prompt: PromptInputs,
    env: Environment,
    group_id: int,
    *,
    settings: GenerationSettings,
    max_turns: int,
    max_context: int,
    seed: int,
    step: int,
    index: int,
    key: str | None = None,
    max_observation_tokens: int | None = None,
    step_timeout_s: float | None = DEFAULT_STEP_TIMEOUT_S,
) -> Trajectory:
    """Run one trajectory of up to ``max_turns`` assistant turns against ``env`` (``run_episodes`` with one start);
    raise ``EnvironmentStartError`` when the environment cannot start."""
    (result,) = run_episodes(
        model,
        processor,
        [EpisodeStart(prompt, env, group_id, index, key)],
        settings,
        max_turns=max_turns,
        max_context=max_context,
        seed=seed,
        step=step,
        max_observation_tokens=max_observation_tokens,
        step_timeout_s=step_timeout_s,
    )
    if isinstance(result, EnvironmentStartError):
        raise result
    return result


def _merge_visual(chunks: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    merged: dict[str, list[torch.Tensor]] = {}
    for chunk in chunks:
        for k, v in chunk.items():
            merged.setdefault(k, []).append(v)
    return {k: torch.cat(v, dim=0) for k, v in merged.items()}


def episode_context(max_prompt_length: int, max_turns: int, max_new_tokens: int, max_observation_tokens: int) -> int:
    """Return the longest context an episode can reach: the prompt, ``max_turns`` assistant turns and the observations
    between them, each at most ``max_observation_tokens`` (a longer one ends the episode anyway)."""
    return max_prompt_length + max_turns * max_new_tokens + (max_turns - 1) * max_observation_tokens
