"""Shared by the benchmark scripts: synthetic images made in memory."""

from __future__ import annotations

import io

from PIL import Image


def png(i: int) -> bytes:
    """A distinct 16x16 PNG (about 100 bytes) for each i."""
    img = Image.new("RGB", (16, 16), ((i * 7) % 256, (i // 256) % 256, (i // 65536) % 256))
    img.putpixel((i % 16, (i // 16) % 16), (255, 255, 255))
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()
