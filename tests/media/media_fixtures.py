"""Media test data, all written by the tests themselves: an mp4 whose frames carry their own index, PDFs whose
pages carry their own colour, and a password-protected PDF built by the PDF specification's algorithms."""

from __future__ import annotations

import hashlib
from pathlib import Path

import av
import numpy as np
from PIL import Image

FPS = 10
SECONDS = 3
NUM_FRAMES = FPS * SECONDS
WIDTH, HEIGHT = 64, 48
LEVEL_STEP = 8  # frame i is a flat grey of level 8 * i, so a decoded frame tells which frame it is


def write_mp4(
    path: Path,
    num_frames: int = NUM_FRAMES,
    fps: int = FPS,
    width: int = WIDTH,
    height: int = HEIGHT,
    faststart: bool = False,
    step: int = LEVEL_STEP,
) -> Path:
    """H.264 mp4 whose frame i is a flat grey of level ``step * i`` (keep ``step * num_frames`` < 256).

    ``faststart`` puts the index (moov) before the data, so a cut file still has its index."""
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", options=options) as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(num_frames):
            pixels = np.full((height, width, 3), step * i, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def frame_numbers(frames, step: int = LEVEL_STEP) -> list[int]:
    """Read back the index drawn into each frame of a [T, 3, H, W] uint8 tensor."""
    return [round(float(frame.float().mean()) / step) for frame in frames]


PAGE_COLORS = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
PAGE_SIZES_PT = [(200, 100), (210, 100), (100, 300)]  # (width, height) in points


def write_pdf(path: Path, sizes=PAGE_SIZES_PT, colors=PAGE_COLORS) -> Path:
    """One flat-coloured page per entry; at resolution 72 a page of w x h pixels is w x h points."""
    pages = [Image.new("RGB", size, color) for size, color in zip(sizes, colors)]
    pages[0].save(path, "PDF", save_all=True, append_images=pages[1:], resolution=72)
    return path


# ---- a password-protected PDF: standard security handler, revision 2 (RC4, 40-bit key) ---------------
# PDF 1.7 (ISO 32000-1) section 7.6.3, algorithms 2 (file key), 3 (/O entry) and 4 (/U entry).

_PASSWORD_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def _rc4(key: bytes, data: bytes) -> bytes:
    state = list(range(256))
    j = 0
    for i in range(256):
        j = (j + state[i] + key[i % len(key)]) % 256
        state[i], state[j] = state[j], state[i]
    out, i, j = bytearray(), 0, 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + state[i]) % 256
        state[i], state[j] = state[j], state[i]
        out.append(byte ^ state[(state[i] + state[j]) % 256])
    return bytes(out)


def encrypted_pdf_bytes(user_password: bytes = b"secret", owner_password: bytes = b"owner") -> bytes:
    """A one-page PDF that opens only with ``user_password`` (or ``owner_password``)."""
    file_id = b"0123456789abcdef"
    permissions = -44
    padded_user = (user_password + _PASSWORD_PAD)[:32]
    owner_key = hashlib.md5((owner_password + _PASSWORD_PAD)[:32]).digest()[:5]
    o_entry = _rc4(owner_key, padded_user)
    file_key = hashlib.md5(padded_user + o_entry + permissions.to_bytes(4, "little", signed=True) + file_id).digest()[
        :5
    ]
    u_entry = _rc4(file_key, _PASSWORD_PAD)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>",
        b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P %d >>"
        % (o_entry.hex().encode(), u_entry.hex().encode(), permissions),
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Encrypt 4 0 R /ID [<%s> <%s>] >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        file_id.hex().encode(),
        file_id.hex().encode(),
        xref,
    )
    return bytes(out)
