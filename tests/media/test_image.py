"""Images: every source form, RGB conversion, budget resizing the processor keeps, and clear errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image
from transformers import Qwen2VLImageProcessor

from mmreason.media import MediaError, image_file_tokens, image_size, load_image, smart_resize


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture()
def photo(tmp_path):
    """A 90 x 130 RGB PNG with a gradient, so a wrong crop or flip would show."""
    ramp = np.add.outer(np.arange(90), np.arange(130)).astype(np.uint8)  # [H, W]
    pixels = np.stack([ramp, 255 - ramp, np.full_like(ramp, 7)], axis=-1)
    path = tmp_path / "photo.png"
    Image.fromarray(pixels).save(path)
    return path, pixels


def test_every_source_form_gives_the_same_pixels(photo):
    path, pixels = photo
    data = path.read_bytes()
    sources = [
        path,
        str(path),
        data,
        bytearray(data),
        Image.open(path),
        {"bytes": data, "path": None},
        {"path": str(path)},
        {"bytes": data, "path": "in-dataset-name.png"},
    ]
    for src in sources:
        image = load_image(src)
        assert image.mode == "RGB"
        np.testing.assert_array_equal(np.asarray(image), pixels)


def test_transparency_is_composited_onto_white():
    rgba = Image.new("RGBA", (4, 4), (10, 20, 30, 0))  # fully transparent
    rgba.putpixel((0, 0), (10, 20, 30, 255))  # one opaque pixel
    image = load_image(_png_bytes(rgba))
    assert image.getpixel((1, 1)) == (255, 255, 255)
    assert image.getpixel((0, 0)) == (10, 20, 30)


def test_sixteen_bit_grey_is_scaled_not_clipped():
    values = np.array([[0, 1000], [2000, 4000]], dtype=np.uint16)  # a 12-bit scan stored in 16 bits
    image = load_image(_png_bytes(Image.fromarray(values)))
    assert np.asarray(image)[..., 0].tolist() == [[0, 64], [128, 255]]  # 255 * v / 4000, rounded


def test_budget_resize_is_kept_by_the_processor(photo):
    path, _ = photo
    max_pixels = 28 * 28 * 6
    image = load_image(path, max_pixels=max_pixels)
    # 90 x 130 -> round to 84 x 140 = 11760 > 4704, beta = sqrt(11700 / 4704) = 1.577,
    # h = floor(90 / 1.577 / 28) * 28 = 56, w = floor(130 / 1.577 / 28) * 28 = 56.
    assert (image.height, image.width) == smart_resize(90, 130, max_pixels=max_pixels) == (56, 56)
    processor = Qwen2VLImageProcessor(max_pixels=max_pixels)
    grid = processor(images=[image], return_tensors="pt")["image_grid_thw"][0].tolist()
    assert grid == [1, 4, 4]  # the processor did not resize again: 56 / 14 = 4
    assert image_file_tokens(path, max_pixels=max_pixels) == 4


@pytest.mark.parametrize("size", [(13, 2000), (500, 7), (333, 517), (1, 1)])
def test_file_tokens_before_loading_match_processor(tmp_path, size):
    height, width = size
    path = tmp_path / "x.jpg"
    Image.new("RGB", (width, height), (1, 2, 3)).save(path)
    assert image_size(path) == (height, width)
    processor = Qwen2VLImageProcessor()
    grid = processor(images=[load_image(path)], return_tensors="pt")["image_grid_thw"][0]
    assert image_file_tokens(path) == int(grid.prod()) // 4


def test_missing_file(tmp_path):
    with pytest.raises(MediaError, match=r"cannot read image '.*nope\.png': file does not exist"):
        load_image(tmp_path / "nope.png")


def test_empty_file_and_directory(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(MediaError, match="empty.png': file is empty"):
        load_image(tmp_path / "empty.png")
    with pytest.raises(MediaError, match="not a regular file"):
        load_image(tmp_path)


def test_corrupt_image_names_the_file(tmp_path):
    path = tmp_path / "corrupt.png"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(MediaError, match=r"cannot read image '.*corrupt\.png': not a readable image"):
        load_image(path)
    with pytest.raises(MediaError, match="corrupt.png"):
        image_file_tokens(path)


def test_truncated_image_names_the_file(tmp_path, photo):
    path, _ = photo
    cut = tmp_path / "cut.png"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert image_size(cut) == (90, 130)  # the header survives the cut ...
    with pytest.raises(MediaError, match=r"'.*cut\.png': image data is corrupt or truncated"):
        load_image(cut)  # ... the pixels do not
    with pytest.raises(MediaError, match=r"'.*cut\.png': image data is corrupt or truncated"):
        load_image(Image.open(cut))  # a lazily opened PIL image still names its file


def test_bad_bytes_and_dicts():
    with pytest.raises(MediaError, match="'<bytes>': not a readable image"):
        load_image(b"definitely not an image")
    with pytest.raises(MediaError, match="'scan.png': not a readable image"):
        load_image({"bytes": b"junk", "path": "scan.png"})
    with pytest.raises(MediaError, match="neither 'bytes' nor 'path'"):
        load_image({"bytes": None, "path": None})
    with pytest.raises(TypeError, match="cannot load an image from int"):
        load_image(42)


def test_extreme_aspect_ratio_names_the_file(tmp_path):
    path = tmp_path / "strip.png"
    Image.new("RGB", (2010, 10)).save(path)
    with pytest.raises(MediaError, match=r"strip\.png': absolute aspect ratio must be smaller than 200"):
        load_image(path, max_pixels=28 * 28 * 100)
    with pytest.raises(MediaError, match="strip.png"):
        image_file_tokens(path)


def test_an_image_over_the_decode_cap_is_refused_from_its_header(tmp_path, monkeypatch):
    """A huge image is refused before a pixel is decoded; the error names the file, the size and the knob."""
    import pytest
    from PIL import Image

    from mmreason.media import MediaError
    from mmreason.media.image import load_image

    path = tmp_path / "big.png"
    Image.new("RGB", (300, 200), "red").save(path)
    monkeypatch.setenv("MMREASON_MAX_IMAGE_PIXELS", "50000")
    with pytest.raises(MediaError, match=r"big.png.*300x200 px is over the decode cap of 50,000.*MMREASON_MAX_IMAGE"):
        load_image(path)
    monkeypatch.setenv("MMREASON_MAX_IMAGE_PIXELS", "60000")
    assert load_image(path).size == (300, 200)
