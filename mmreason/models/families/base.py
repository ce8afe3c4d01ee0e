"""What the engine asks of a model family, in one record per family (``ModelFamily``).

Everything that differs between VLM families and that the engine needs lives here, never as an
``if model_type == ...`` in the rooms that use it:

- ``patch_size`` / ``merge_size``: a visual token covers ``(patch_size * merge_size)^2`` pixels
  (Qwen2/2.5-VL: 14 px patches merged 2 x 2, so 28 x 28 = 784 px; Qwen3-VL: 16 px patches, 32 x 32 = 1024 px);
  budgets and the downscale floor use it.
- ``positions``: how a row's positions are computed. ``"mrope"``: three-axis rotary positions from the
  model's ``get_rope_index`` and the per-row offset ``rope_deltas`` it leaves on the backbone (Qwen2-VL,
  Qwen2.5-VL; Qwen3-VL's interleaved M-RoPE is the same interface, its DeepStack features are added inside
  the model's forward at the visual tokens, so a suffix pass without visual tokens needs none of them).
- ``shared_prefix``: ``"kv"`` when a prompt's cache can be computed once and expanded to the G rows of its
  group, in the update (``rollout/shared_prefix.py``) and in generation (``rollout/generate.py``);
  ``"generation"`` when only generation expands it (the update runs every row whole); ``"plain"`` when
  every row runs whole in both.
- ``never_sampled``: special tokens the sampler must never draw (a sampled ``<|image_pad|>`` breaks the next
  forward); ``turn_end_token``: the token that ends an assistant turn (an EOS of generation).
- ``frame_times``: how a video's frame times reach the model: ``"mrope"`` (temporal positions scaled by
  ``second_per_grid_ts``, Qwen2.5-VL), ``"text"`` (``<t seconds>`` written before each frame by the
  processor, Qwen3-VL), ``"none"`` (frame order only, Qwen2-VL).
- ``video_plan``: True when ``mmreason.media.video_plan`` counts the family's video tokens exactly from the
  header (the Qwen2-VL video processor's per-frame limits); False when the processor's own resize decides
  (the count is then taken after encoding; a prompt over the limit is still skipped or downscaled).

- ``budget``: ``"pixels"`` when the visual tokens follow the pixel budget (``prompt_overflow: downscale``
  works), ``"tiles"`` when an image becomes fixed-size tiles (InternVL): an over-long prompt is skipped.
- ``grids``: the processor returns ``*_grid_thw``, by which a batch's visual tensors are cut per item.
- ``fsdp_units``: the module classes FSDP shards one by one (the decoder layer and the vision block), per
  ``model_type`` of the checkpoint's config or of its ``text_config`` / ``vision_config`` (InternVL's decoder is
  its text model's: Qwen2, Qwen3, Llama); ``units_for(config)`` picks a checkpoint's. The trainer wraps these
  when the accelerate config names no ``fsdp_transformer_layer_cls_to_wrap`` or names classes that are not
  the family's (``train/launch_checks.py``); ``tests/models/test_fsdp_units.py`` builds every family and finds them.

- ``tool_calls``: the format the family writes tool calls in (``rollout/tool_calls.py``): ``"hermes"``
  (``<tool_call>`` JSON) for every family served today.

The chat-turn delimiters are not stored: ``rollout/chat_turns.py`` reads them from the checkpoint's own
chat template, which every family ships.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

Positions = Literal["mrope", "rope1d"]
SharedPrefix = Literal["kv", "generation", "plain"]
FrameTimes = Literal["mrope", "text", "none"]
Budget = Literal["pixels", "tiles"]
ToolCalls = Literal["hermes"]  # mmreason/rollout/tool_calls.py FORMATS


@dataclass(frozen=True)
class ModelFamily:
    name: str  # the adapter's name, e.g. "qwen2_vl"
    model_types: tuple[str, ...]  # config.json ``model_type`` values it serves
    processor_classes: tuple[str, ...]  # its processors' class names (the prompt builder holds only a processor)
    adapter_file: str  # where it lives, for error messages
    patch_size: int
    merge_size: int
    positions: Positions
    shared_prefix: SharedPrefix
    never_sampled: tuple[str, ...]
    turn_end_token: str
    frame_times: FrameTimes
    video_plan: bool = True
    budget: Budget = "pixels"  # pixels: tokens follow the pixel budget (downscale works); tiles: fixed-size tiles
    grids: bool = True  # the processor returns ``*_grid_thw`` (visual tensors split per item by their grids)
    fsdp_units: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (model_type, FSDP unit class names) pairs
    tool_calls: ToolCalls = "hermes"  # how the model writes a tool call (rollout/tool_calls.py)

    def __post_init__(self) -> None:
        """A family whose adapter names a value outside its field's closed set fails at import, naming both."""
        for name, kind in (
            ("positions", Positions),
            ("shared_prefix", SharedPrefix),
            ("frame_times", FrameTimes),
            ("budget", Budget),
            ("tool_calls", ToolCalls),
        ):
            if getattr(self, name) not in get_args(kind):
                raise ValueError(
                    f"{self.adapter_file}: {self.name}.{name}={getattr(self, name)!r} is not one of "
                    f"{', '.join(get_args(kind))}"
                )

    def units_for(self, config: dict) -> tuple[str, ...]:
        """The FSDP unit classes of a checkpoint's ``config.json`` (as a dict): those declared for its
        ``model_type`` and for its text and vision configs' model types, in that order."""
        by_type = dict(self.fsdp_units)
        types = [config.get("model_type")]
        types += [(config.get(k) or {}).get("model_type") for k in ("text_config", "vision_config")]
        return tuple(dict.fromkeys(c for t in types if t in by_type for c in by_type[t]))

    @property
    def pixels_per_token(self) -> int:
        """Pixels one visual token covers: ``(patch_size * merge_size)^2``."""
        return (self.patch_size * self.merge_size) ** 2
