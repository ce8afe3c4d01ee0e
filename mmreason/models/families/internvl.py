"""InternVL (transformers' ``InternVLForConditionalGeneration``): an InternViT vision tower on fixed-size
tiles (an image is cut into up to ``max_patches`` tiles plus a thumbnail), a pixel-shuffle projector
(``downsample_ratio`` 0.5: 2 x 2 patches a token) and a Qwen2 / Llama decoder with plain 1-D RoPE. Each image
is ``<img>`` + ``image_seq_length`` ``<IMG_CONTEXT>`` per tile + ``</img>``; a video is ``FrameN: <img>...</img>``
per frame, its times not written (frame order only).

Why this family: its decoder is a plain causal LM with 1-D positions and the Qwen chat scaffolding
(``<|im_start|>`` turns), so every engine path runs unchanged except those that need M-RoPE; its vision front
end (tiles, no grids) is the most different from Qwen's among the families in transformers 5.24, which is
what the adapter seam must absorb. Gemma3 would also need its bidirectional image-token attention mask
(``token_type_ids``) through every forward.

What differs for the engine: visual tokens come in tiles, not pixels (``budget="tiles"``): pixel budgets do
not change the count, so an over-long prompt is skipped (never truncated or downscaled); the processor
returns no ``*_grid_thw``, so an eval batch is encoded doc by doc (``grids=False``); positions are 1-D
(``rope1d``): the shared prefix's suffix continues at ``P + j`` and the prefill counts the real tokens.

Source: transformers 5.x ``models/internvl`` (``InternVLProcessor.replace_image_token``,
``InternVLModel.pixel_shuffle``) and ``models/got_ocr2`` (``GotOcr2ImageProcessor.crop_image_to_patches``).
"""

from mmreason.models.families.base import ModelFamily

INTERNVL = ModelFamily(
    name="internvl",
    model_types=("internvl",),
    processor_classes=("InternVLProcessor",),
    adapter_file="mmreason/models/families/internvl.py",
    patch_size=14,
    merge_size=2,
    positions="rope1d",
    shared_prefix="kv",
    never_sampled=("<img>", "</img>", "<IMG_CONTEXT>", "<video>"),
    turn_end_token="<|im_end|>",
    frame_times="none",
    video_plan=False,
    budget="tiles",
    grids=False,
    # the vision layer, and the decoder layer of its text model (text_config.model_type: InternVL3's Qwen2,
    # InternVL3.5's Qwen3, a Llama decoder)
    fsdp_units=(
        ("internvl", ("InternVLVisionLayer",)),
        ("qwen2", ("Qwen2DecoderLayer",)),
        ("qwen3", ("Qwen3DecoderLayer",)),
        ("llama", ("LlamaDecoderLayer",)),
    ),
)

FAMILIES = (INTERNVL,)
