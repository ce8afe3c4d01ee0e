"""Media loading for vision-language models: images, video clips, PDF pages, and their visual-token cost.

Every loader raises ``MediaError`` (a ValueError naming the file and what is wrong) for bad input, and
every kind of media has a token function that reports, before any pixel is decoded, how many visual
tokens the Qwen2-VL / Qwen2.5-VL processor will produce for it.
"""

from mmreason.media.budget import (
    IMAGE_MAX_PIXELS,
    IMAGE_MIN_PIXELS,
    VIDEO_MAX_PIXELS,
    VIDEO_MIN_PIXELS,
    PixelBudget,
    frame_pixel_cap,
    image_tokens,
    pixels_for_tokens,
    smart_resize,
    video_tokens,
)
from mmreason.media.errors import MediaError
from mmreason.media.image import image_file_tokens, image_size, load_image, to_rgb
from mmreason.media.pdf import (
    pdf_outline,
    pdf_page_count,
    pdf_page_sizes,
    pdf_page_text,
    pdf_page_texts,
    pdf_page_tokens,
    render_pages,
)
from mmreason.media.video import VideoClip, load_video, probe_video, video_clip_tokens, video_metadata
from mmreason.media.video_plan import VideoInfo, plan_frames, window_frames

__all__ = [
    "IMAGE_MAX_PIXELS",
    "IMAGE_MIN_PIXELS",
    "VIDEO_MAX_PIXELS",
    "VIDEO_MIN_PIXELS",
    "MediaError",
    "PixelBudget",
    "VideoClip",
    "VideoInfo",
    "frame_pixel_cap",
    "image_file_tokens",
    "image_size",
    "image_tokens",
    "load_image",
    "load_video",
    "pdf_outline",
    "pdf_page_count",
    "pdf_page_text",
    "pdf_page_texts",
    "pdf_page_sizes",
    "pdf_page_tokens",
    "pixels_for_tokens",
    "plan_frames",
    "probe_video",
    "render_pages",
    "smart_resize",
    "to_rgb",
    "video_clip_tokens",
    "video_metadata",
    "video_tokens",
    "window_frames",
]
