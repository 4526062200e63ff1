"""ImageRef: the original encoded bytes of an image and their sha256.

Images are stored exactly as they came (never re-encoded) and decoded only to run a model.
Decoding keeps Pillow's decompression-bomb limit on and turns its warning into an error, so a
hostile or broken file is rejected with a reason instead of exhausting memory.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from dataclasses import dataclass, field

from PIL import Image

# Pillow's own default (about 89 megapixels); kept as a named constant so the card can cite it.
MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS or 89_478_485


class ImageError(ValueError):
    """An image that cannot be read or decoded; the message names the file."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class ImageRef:
    """An image by its file and content hash; the bytes are read on demand.

    ``path`` is where the original file lives; ``sha256`` the hex digest of its bytes at the time
    it was admitted. ``read()`` re-checks the hash, so a file changed after admission is an error
    rather than a silently different dataset.
    """

    path: str
    sha256: str
    size: int = field(default=0, compare=False)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @classmethod
    def from_file(cls, path: str | os.PathLike, *, check_decodes: bool = True) -> "ImageRef":
        path = str(path)
        try:
            with open(path, "rb") as fh:  # not Path(path).read_bytes(): pathlib's parsing costs more than the read
                data = fh.read()
        except FileNotFoundError:
            raise ImageError(f"{path}: image file not found") from None
        except OSError as exc:
            raise ImageError(f"{path}: cannot read image file ({exc.strerror or exc})") from None
        if check_decodes:
            check_decodable(data, path)
        return cls(path=path, sha256=sha256_bytes(data), size=len(data))

    def read(self) -> bytes:
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise ImageError(f"{self.path}: cannot read image file ({exc})") from None
        if sha256_bytes(data) != self.sha256:
            raise ImageError(f"{self.path}: file changed since it was admitted (sha256 differs)")
        return data

    def open(self) -> Image.Image:
        """Decode for a model (RGB), with the decompression-bomb limit enforced."""
        return decode(self.read(), self.path)


def _open_checked(data: bytes, name: str) -> Image.Image:
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            img = Image.open(io.BytesIO(data))
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise ImageError(f"{name}: image exceeds the decompression-bomb limit ({exc})") from None
        except Exception as exc:  # Pillow raises several types for undecodable input
            raise ImageError(f"{name}: not a decodable image ({type(exc).__name__}: {exc})") from None
    if img.width * img.height > MAX_IMAGE_PIXELS:
        raise ImageError(f"{name}: image has {img.width}x{img.height} pixels, over the limit")
    return img


def check_decodable(data: bytes, name: str = "<bytes>") -> None:
    """Raise ImageError unless ``data`` fully decodes (truncated files included)."""
    img = _open_checked(data, name)
    try:
        img.load()
    except Exception as exc:
        raise ImageError(f"{name}: image data is truncated or corrupt ({type(exc).__name__}: {exc})") from None


def decode(data: bytes, name: str = "<bytes>") -> Image.Image:
    img = _open_checked(data, name)
    try:
        img.load()
        return img.convert("RGB") if img.mode != "RGB" else img
    except Exception as exc:
        raise ImageError(f"{name}: image data is truncated or corrupt ({type(exc).__name__}: {exc})") from None
