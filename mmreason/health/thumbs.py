"""Thumbnails for the report: each image, document page or video (a few frames) named by a rollout or eval
record, downscaled and inlined once as a PNG data URI (``Thumbs.ref`` hands out ids the page fills in).

Only files inside the report's directories, or inside the project's data cache (``$MMREASON_CACHE``, where
packs write the data they generate: the main job's images), are read (any other path that is absolute or climbs
out with ``..`` or a link is refused: a report of a shared run must not carry other files the reader can open) unless
``allow_outside`` (``--allow-outside-media``), which also looks paths up from the current directory. At most
``MAX_THUMBS`` thumbnails a report."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import TYPE_CHECKING

from mmreason import media as m
from mmreason.paths import cache_dir

if TYPE_CHECKING:
    import torch
    from PIL import Image

SIDE = 128  # longest side of a thumbnail, pixels
VIDEO_FRAMES = 4
MAX_THUMBS = 300  # about 5 MB of PNGs


class Thumbs:
    def __init__(self, roots: list[Path], *, allow_outside: bool = False) -> None:
        self.roots = roots  # where relative media paths are looked up
        self.allow_outside = allow_outside
        self.uris: dict[str, str] = {}  # id -> data URI
        self.ids: dict[str, list[str]] = {}  # media path -> its thumbnails' ids (a video has several)
        self.missing: dict[str, str] = {}  # media path -> why it has no thumbnail

    def ref(self, media: str) -> list[str]:
        """The thumbnail ids of one media path ([] when it cannot be read: ``missing`` says why)."""
        if media not in self.ids:
            if len(self.uris) >= MAX_THUMBS:
                self.missing[media] = f"not inlined: the report's {MAX_THUMBS} thumbnails are used"
                return []
            try:
                images = self._load(media)
            except Exception as exc:  # noqa: BLE001 - a report shows what it can; the reason is on the page
                images, self.missing[media] = [], f"{type(exc).__name__}: {str(exc)[:200]}"
            ids = []
            for image in images:
                ids.append(f"t{len(self.uris)}")
                self.uris[ids[-1]] = _data_uri(image)
            self.ids[media] = ids
        return self.ids[media]

    def _path(self, name: str) -> Path:
        p = Path(name)
        if not self.allow_outside:
            for root in self.roots:
                inside = (root / p).resolve()
                if inside.is_relative_to(root.resolve()) and inside.exists():
                    return inside
            cache = cache_dir().resolve()
            if p.is_absolute() and p.resolve().is_relative_to(cache) and p.resolve().exists():
                return p.resolve()
            if p.is_absolute() or ".." in p.parts or any((root / p).exists() for root in self.roots):
                raise PermissionError(f"{name!r} is outside the report's directory (--allow-outside-media inlines it)")
            raise FileNotFoundError(
                f"{name!r} not found in the report's directory (--allow-outside-media also "
                "looks in the current directory)"
            )
        for root in [Path.cwd(), *self.roots]:
            if (root / p).exists():
                return root / p
        raise FileNotFoundError(f"{name!r} not found")

    def _load(self, media: str) -> list:
        if media.startswith("<"):
            raise ValueError("an in-memory image (not a file)")
        if "#page=" in media:
            source, index = media.rsplit("#page=", 1)
            path = self._path(source)
            if path.suffix.lower() == ".pdf":
                return m.render_pages(path, pages=[int(index)], max_pixels=SIDE * SIDE * 2, min_pixels=28 * 28 * 4)
            return [m.load_image(path)]
        path = self._path(media)
        if path.suffix.lower() in (".mp4", ".avi", ".mov", ".mkv", ".webm"):
            clip = m.load_video(path, num_frames=VIDEO_FRAMES, max_pixels=SIDE * SIDE * 2, min_pixels=28 * 28 * 4)
            return [_frame_image(f) for f in clip.frames]
        return [m.load_image(path)]


def _frame_image(frame: torch.Tensor) -> Image.Image:
    from PIL import Image

    array = frame.permute(1, 2, 0).clamp(0, 255).to("cpu").numpy().astype("uint8")
    return Image.fromarray(array)


def _data_uri(image: Image.Image) -> str:
    image = image.convert("RGB")
    image.thumbnail((SIDE, SIDE))
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
