"""Qwen2-VL and Qwen2.5-VL: 14 px patches merged 2 x 2 (28 px per token side), M-RoPE positions from
``get_rope_index`` and ``rope_deltas``; Qwen2.5-VL scales temporal positions by ``second_per_grid_ts``.

Source: transformers 5.x ``models/qwen2_vl`` and ``models/qwen2_5_vl`` (``get_rope_index``,
``Qwen2VLImageProcessor``: ``patch_size=14``, ``merge_size=2``).
"""

from mmreason.models.families.base import ModelFamily

QWEN_VISION_SPECIALS = (
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
)

QWEN2_VL = ModelFamily(
    name="qwen2_vl",
    model_types=("qwen2_vl",),
    processor_classes=("Qwen2VLProcessor",),
    adapter_file="mmreason/models/families/qwen2_vl.py",
    patch_size=14,
    merge_size=2,
    positions="mrope",
    shared_prefix="kv",
    never_sampled=QWEN_VISION_SPECIALS,
    turn_end_token="<|im_end|>",
    frame_times="none",
    fsdp_units=(("qwen2_vl", ("Qwen2VLDecoderLayer", "Qwen2VLVisionBlock")),),
)

QWEN2_5_VL = ModelFamily(
    name="qwen2_5_vl",
    model_types=("qwen2_5_vl",),
    processor_classes=("Qwen2_5_VLProcessor",),
    adapter_file="mmreason/models/families/qwen2_vl.py",
    patch_size=14,
    merge_size=2,
    positions="mrope",
    shared_prefix="kv",
    never_sampled=QWEN_VISION_SPECIALS,
    turn_end_token="<|im_end|>",
    frame_times="mrope",
    fsdp_units=(("qwen2_5_vl", ("Qwen2_5_VLDecoderLayer", "Qwen2_5_VLVisionBlock")),),
)

FAMILIES = (QWEN2_VL, QWEN2_5_VL)
