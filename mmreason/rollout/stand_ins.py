"""Vision stand-ins: tiny image and video rows that keep every process's vision calls the same.

Under DDP and FSDP each forward and backward is a sequence of collectives (FSDP2 all-gathers every vision
block it runs, DDP all-reduces every gradient it expects). A process whose mini-batch holds no image would
skip the vision tower while another runs it, and the two would wait in different collectives: a gloo size
mismatch on CPUs, a hang on NCCL. So a mini-batch that lacks a kind of visual input some other process has
(``calls``) carries a stand-in row of that kind (``stand_ins``): a one-line chat with a 56 x 56 black image
(or a 2-frame 56 x 56 video), whose single trained token is tied into the log-probs with weight 0
(``rollout.forward.token_logprobs``). The tower then runs, and gets a zero gradient, on every process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from PIL import Image

from mmreason.rollout.prompts import encode, render_chat
from mmreason.types import Trajectory

if TYPE_CHECKING:
    from transformers import ProcessorMixin

# Which vision call a processor output key makes in the model's forward (images and videos are separate
# calls in the Qwen families; InternVL feeds video frames as images, so its video rows add no call).
CALL_OF_KEY = {"pixel_values": "image", "pixel_values_videos": "video"}
CALLS = ("image", "video")
# pixels: the smallest input every family's processor accepts (4 visual tokens for Qwen2.5-VL)
SIDE = 56

_CACHE: dict[tuple[int, str], Trajectory] = {}


def calls(trajectories: list[Trajectory]) -> set[str]:
    """Return the vision calls (``"image"``, ``"video"``) a forward over ``trajectories`` makes."""
    return {CALL_OF_KEY[k] for t in trajectories for v in t.visual for k in v if k in CALL_OF_KEY}


def stand_in(processor: ProcessorMixin, call: str) -> Trajectory:
    """Build a tiny row that makes the ``call`` vision call (cached per processor): a user turn with one black image or
    2-frame video and the word "ok", its last token marked trained (the loss weighs it by 0)."""
    key = (id(processor), call)
    if key not in _CACHE:
        _CACHE[key] = _build(processor, call)
    return _CACHE[key]


def _build(processor: ProcessorMixin, call: str) -> Trajectory:
    if call not in CALLS:
        raise ValueError(f"no vision stand-in for {call!r}; known: {', '.join(CALLS)}")
    messages = [{"role": "user", "content": [{"type": call}, {"type": "text", "text": "ok"}]}]
    text = render_chat(processor, messages)
    if call == "image":
        out = encode(processor, text, [Image.new("RGB", (SIDE, SIDE))], [], [])
    else:
        frames = torch.zeros(2, 3, SIDE, SIDE, dtype=torch.uint8)
        meta = {"total_num_frames": 2, "fps": 2.0, "frames_indices": [0, 1], "duration": 1.0}
        out = encode(processor, text, [], [frames], [{**meta, "height": SIDE, "width": SIDE}])
    ids = out["input_ids"][0]
    types = out.get("mm_token_type_ids")
    mask = torch.zeros_like(ids)
    mask[-1] = 1
    visual = {k: v for k, v in out.items() if k not in ("input_ids", "attention_mask", "mm_token_type_ids")}
    if not any(k in CALL_OF_KEY for k in visual):
        raise ValueError(f"the processor made no visual input for a {call} stand-in (keys: {sorted(out)})")
    return Trajectory(
        f"<{call} stand-in>",
        -1,
        ids,
        mask,
        int(ids.numel()) - 1,
        "",
        mm_token_type_ids=types[0] if types is not None else torch.zeros_like(ids),
        visual=[visual],
    )
