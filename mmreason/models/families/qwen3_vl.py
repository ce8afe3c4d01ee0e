"""Qwen3-VL, dense and MoE: 16 px patches merged 2 x 2 (32 px per token side), interleaved M-RoPE
(``mrope_interleaved``) with the same ``get_rope_index`` / ``rope_deltas`` interface as Qwen2.5-VL, and
DeepStack: features of three vision-tower layers added to the first decoder layers' hidden states at the
visual tokens, inside the model's forward. A video is one vision block per temporal patch, each preceded by
its time as text (``<1.5 seconds>``, written by ``Qwen3VLProcessor``); temporal positions carry no time.
The video processor limits a clip's pixels over all its frames, so the header plan does not count its tokens
(``video_plan=False``): the count after encoding decides.

Source: transformers 5.x ``models/qwen3_vl`` (``Qwen3VLModel.get_rope_index``, ``Qwen3VLTextModel._deepstack_process``,
``Qwen3VLProcessor._calculate_timestamps``, ``video_processing_qwen3_vl.smart_resize``).
"""

from mmreason.models.families.base import ModelFamily
from mmreason.models.families.qwen2_vl import QWEN_VISION_SPECIALS

QWEN3_VL = ModelFamily(
    name="qwen3_vl",
    model_types=("qwen3_vl", "qwen3_vl_moe"),
    processor_classes=("Qwen3VLProcessor",),
    adapter_file="mmreason/models/families/qwen3_vl.py",
    patch_size=16,
    merge_size=2,
    positions="mrope",
    shared_prefix="kv",
    never_sampled=QWEN_VISION_SPECIALS,
    turn_end_token="<|im_end|>",
    frame_times="text",
    video_plan=False,
    fsdp_units=(
        ("qwen3_vl", ("Qwen3VLTextDecoderLayer", "Qwen3VLVisionBlock")),
        ("qwen3_vl_moe", ("Qwen3VLMoeTextDecoderLayer", "Qwen3VLMoeVisionBlock")),
    ),
)

# Qwen3.5: the same vision tower (no DeepStack) and positions, and a hybrid decoder whose linear-attention
# (gated delta net) layers carry a convolution window and a recurrent state instead of K/V. Generation
# computes them once per prompt and expands them to the G rows, like K/V (it samples what per-row prompt
# copies sample: tests/models/test_families.py). The update takes the plain path: continuing the prompt's
# states gives the plain path's log-probs (to 5e-7), but the gradients of the decay parameters (A_log,
# dt_bias, in_proj_a) differ by 4e-5 to 2e-4 relative (4e-5 in float64 too), between transformers' chunked delta rule
# over the whole row and the same rule continuing from the prompt's final state.
QWEN3_5 = ModelFamily(
    name="qwen3_5",
    model_types=("qwen3_5",),
    processor_classes=("Qwen3VLProcessor",),
    adapter_file="mmreason/models/families/qwen3_vl.py",
    patch_size=16,
    merge_size=2,
    positions="mrope",
    shared_prefix="generation",
    never_sampled=QWEN_VISION_SPECIALS,
    turn_end_token="<|im_end|>",
    frame_times="text",
    video_plan=False,
    fsdp_units=(("qwen3_5", ("Qwen3_5DecoderLayer", "Qwen3_5VisionBlock")),),
)

FAMILIES = (QWEN3_VL, QWEN3_5)
