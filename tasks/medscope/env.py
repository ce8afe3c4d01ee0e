"""The MedScope environment: the model looks closer at a long video through two tools.

First turn (built by the loader, not here): the question and a sparse global view of the whole video (16
frames at a low per-frame budget, their timestamps in the text). After each assistant turn ``step(text)``:

- a turn with an ``<answer>`` (or with no tool call at all) ends the episode;
- otherwise its one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` is parsed (bounded JSON,
  never evaluated) and checked against the tool schema (``mmreason.rewards.tools``: known tool, no unknown
  argument, finite numbers inside ``[0, duration]``, start < end) and the limits below, then run:

  ``crop_video(start, end)``  frames sampled inside the window at ``crop_fps`` (<= 2 fps), at most
                              ``crop_max_frames``, at ``crop_max_pixels`` per frame, as a video;
  ``get_frame(t)``            the ``frame_count`` source frames nearest to ``t``, at ``frame_max_pixels``, as
                              images;

  each observation names the timestamps of what it shows (``action_mask`` 0: never trained).

Limits (``ToolLimits``): at most ``max_calls`` executed calls per episode, a crop window of at least
``min_window`` seconds, at most ``max_observation_tokens`` visual tokens over the whole episode (counted from
the video header before anything is decoded), turns of at most ``max_turn_chars`` characters. A turn that
breaks any rule -- a call that does not parse, an unknown tool, a NaN, a window outside the video, a call
inside ``<think>``, unbalanced tags, several calls in one turn -- gets an error observation (``info["error"]``,
counted against format) and nothing runs; after ``max_errors`` errors the episode ends. A failure while
decoding raises: the rollout engine ends that episode with the reason and counts a fault.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mmreason.media import MediaError, image_tokens, probe_video, video_metadata, video_tokens
from mmreason.media.video import clip_cache
from mmreason.parsing import all_tag_bodies, as_text, tag_tokens
from mmreason.rewards.format import parse_tool_call
from mmreason.rewards.tools import MEDSCOPE_TOOLS, check_call, tool_table
from mmreason.rollout.environment import Observation
from mmreason.types import Sample

TOOLS = MEDSCOPE_TOOLS
TOOL_HINT = (
    'Call one tool as <tool_call>{"name": "crop_video", "arguments": {"start": s, "end": e}}</tool_call> '
    'or <tool_call>{"name": "get_frame", "arguments": {"t": t}}</tool_call> (seconds), '
    "or give the final <answer>..</answer>."
)


@dataclass(frozen=True)
class ToolLimits:
    """The environment's bounds; every one keeps a hostile episode small."""

    crop_fps: float = 2.0
    crop_max_frames: int = 8
    crop_max_pixels: int = 28 * 28 * 4
    frame_count: int = 2
    frame_max_pixels: int = 28 * 28 * 4
    min_window: float = 1.0
    max_calls: int = 4
    max_errors: int = 3
    max_observation_tokens: int = 2048
    max_turn_chars: int = 20_000

    def __post_init__(self):
        if not 0 < self.crop_fps <= 2:
            raise ValueError(f"medscope tool limits: crop_fps {self.crop_fps} must be in (0, 2]")
        if self.crop_max_frames < 2 or self.frame_count < 1 or self.max_calls < 0:
            raise ValueError(f"medscope tool limits: {asdict(self)} (crop_max_frames >= 2, frame_count >= 1)")

    @classmethod
    def of(cls, value: Any) -> ToolLimits:
        """From a mapping (the loader's ``tool_limits`` option); unknown keys are an error naming them."""
        if isinstance(value, ToolLimits):
            return value
        value = dict(value or {})
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"medscope tool_limits: unknown keys {unknown} (known: {sorted(cls.__dataclass_fields__)})"
            )
        return cls(**value)


CLIPS = clip_cache()  # crops of the same video repeat across the G rollouts of a group


class MedScopeEnv:
    stop_strings = ("</tool_call>", "</answer>")

    def __init__(self, limits: ToolLimits | None = None):
        self.default_limits = limits or ToolLimits()
        self.table = tool_table(TOOLS)

    def reset(self, sample: Sample) -> None:
        path = sample.videos[0].path if sample.videos else sample.meta.get("video_path")  # the frames view: meta
        if not path:
            raise ValueError(f"sample {sample.id!r} has no video")
        self.path = str(path)
        self.limits = ToolLimits.of(sample.meta.get("tool_limits") or self.default_limits)
        self.calls = self.errors = self.tokens = 0
        try:
            self.info = probe_video(self.path)
            self.broken: MediaError | None = None
        except MediaError as err:  # the video broke after its prompt was built: the first step raises it,
            self.broken = err  # which ends this episode as a counted environment fault
            return
        self.duration = self.info.num_frames / self.info.fps

    # ---- one turn ----------------------------------------------------------------------------------

    def step(self, action_text: str) -> Observation:
        if self.broken is not None:
            raise self.broken
        text = as_text(action_text)
        if len(text) > self.limits.max_turn_chars:
            return self._error(f"a turn of {len(text)} characters is over the limit of {self.limits.max_turn_chars}")
        tokens = tag_tokens(text, ("tool_call", "think", "answer"))
        # The end of an episode is recorded too, so the trajectory's tool calls are always the ones that ran
        # (a call written beside the answer never ran and earns no grounding).
        if any(name == "answer" for _, _, name, closing in tokens if closing):
            return Observation(info={"end": "answer"}, done=True)  # rewards read the answer from the text
        calls = [t for t in tokens if t[2] == "tool_call"]
        if not calls:
            return Observation(info={"end": "no tool call"}, done=True)
        problem = _tag_problem(tokens)
        if problem:
            return self._error(problem)
        bodies = all_tag_bodies(text, "tool_call", limit=2)
        if len(bodies) != 1:
            return self._error(f"one tool call per turn, got {len(calls) // 2}")
        call = parse_tool_call(bodies[0]) if len(bodies[0]) <= 2_000 else None
        name = call["name"][:40] if call else None
        reason = check_call(call, self.table, {"duration": self.duration})
        if reason is None:
            reason = self._limit_problem(call)
        if reason is not None:
            return self._error(reason, name)
        return self._run(call)

    def _error(self, message: str, name: str | None = None) -> Observation:
        self.errors += 1
        info = {"error": message[:300], **({"tool": name} if name else {})}
        done = self.errors >= self.limits.max_errors
        return Observation(text=f"Error: {message[:300]}. {TOOL_HINT}", info=info, done=done)

    def _limit_problem(self, call: dict) -> str | None:
        if self.calls >= self.limits.max_calls:
            return f"the budget of {self.limits.max_calls} tool calls is spent; answer now"
        args = call["arguments"]
        if call["name"] == "crop_video" and args["end"] - args["start"] < self.limits.min_window:
            return f"a window of {args['end'] - args['start']:g} s is shorter than {self.limits.min_window:g} s"
        cost = self._cost(call)
        if self.tokens + cost > self.limits.max_observation_tokens:
            return (
                f"the observation budget of {self.limits.max_observation_tokens} visual tokens is spent "
                f"({self.tokens} used, this call needs {cost}); answer now"
            )
        return None

    # ---- the tools ---------------------------------------------------------------------------------

    def _crop_plan(self, start: float, end: float) -> dict[str, Any]:
        seconds = end - start
        frames = max(2, min(self.limits.crop_max_frames, int(seconds * self.limits.crop_fps)))
        inside = max(1, int(seconds * self.info.fps))
        if frames > inside:  # a window shorter than the frames asked for: every frame it holds, at the fps
            return {"fps": self.limits.crop_fps}
        return {"num_frames": frames}

    def _frame_window(self, t: float) -> tuple[float, float]:
        """[start, end) holding the ``frame_count`` source frames nearest to ``t``."""
        fps, n = self.info.fps, self.limits.frame_count
        first = int(round(t * fps)) - (n - 1) // 2
        first = max(0, min(first, self.info.num_frames - n))
        return first / fps, (first + n) / fps

    def _cost(self, call: dict) -> int:
        h, w = self.info.height, self.info.width
        if call["name"] == "crop_video":
            plan = self._crop_plan(call["arguments"]["start"], call["arguments"]["end"])
            n = plan.get("num_frames") or self.limits.crop_max_frames
            return video_tokens(
                n,
                h,
                w,
                max_pixels=self.limits.crop_max_pixels,
                min_pixels=min(self.limits.crop_max_pixels, 28 * 28 * 4),
            )
        return self.limits.frame_count * image_tokens(
            h, w, min_pixels=min(self.limits.frame_max_pixels, 56 * 56), max_pixels=self.limits.frame_max_pixels
        )

    def _run(self, call: dict) -> Observation:
        self.calls += 1
        self.tokens += self._cost(call)
        args = call["arguments"]
        if call["name"] == "crop_video":
            start, end = float(args["start"]), float(args["end"])
            clip = self._load(
                start=start,
                end=end,
                max_frames=self.limits.crop_max_frames,
                max_pixels=self.limits.crop_max_pixels,
                **self._crop_plan(start, end),
            )
            info = {"name": "crop_video", "arguments": {"start": start, "end": end}, "timestamps": clip.timestamps}
            text = (
                f"crop_video [{start:g}, {end:g}] s: {len(clip.timestamps)} frames at t = {_times(clip.timestamps)} s"
            )
            return Observation(
                text=text, videos=[clip.frames], video_metadata=[video_metadata(clip)], info=info, done=False
            )
        t = float(args["t"])
        start, end = self._frame_window(t)
        clip = self._load(
            start=start, end=end, num_frames=self.limits.frame_count, max_pixels=self.limits.frame_max_pixels
        )
        frames = clip.to_pil()[: self.limits.frame_count]
        stamps = clip.timestamps[: self.limits.frame_count]
        info = {"name": "get_frame", "arguments": {"t": t}, "timestamps": stamps}
        text = f"get_frame {t:g} s: {len(frames)} frames at t = {_times(stamps)} s"
        return Observation(text=text, images=frames, info=info, done=False)

    def _load(self, **kwargs):
        try:
            return CLIPS.get(self.path, min_pixels=min(kwargs["max_pixels"], 28 * 28 * 4), **kwargs)
        except MediaError:
            raise  # the file broke mid-episode: the engine ends this episode and counts a fault
        except ValueError as err:  # a plan the checks above should have refused: a fault with the reason
            raise MediaError(self.path, f"cannot sample {kwargs}: {err}", "video") from err


def _tag_problem(tokens: list[tuple[int, int, str, bool]]) -> str | None:
    """Why the turn's tags cannot hold a runnable call: unbalanced / nested tags or a call inside <think>."""
    open_tags: list[str] = []
    for _, _, name, closing in tokens:
        if not closing:
            if name in open_tags:
                return f"<{name}> opened twice"
            if name == "tool_call" and "think" in open_tags:
                return "a tool call inside <think> is not run; call after </think>"
            open_tags.append(name)
        else:
            if not open_tags or open_tags[-1] != name:
                return f"unbalanced tags: </{name}> without its <{name}>"
            open_tags.pop()
    if open_tags:
        return f"unbalanced tags: <{open_tags[-1]}> is never closed"
    return None


def _times(stamps: list[float]) -> str:
    return ", ".join(f"{s:.1f}" for s in stamps)


def medscope_environment() -> MedScopeEnv:
    """A fresh environment (limits come from each sample's ``tool_limits``, else the defaults)."""
    return MedScopeEnv()
