"""ImageRef keeps original bytes and their hash; decoding keeps the decompression-bomb limit on."""

from __future__ import annotations

import hashlib

import pytest
from PIL import Image

from orandcar_builder import images
from orandcar_builder.images import ImageError, ImageRef, decode

from .conftest import write_png


def test_ref_hashes_the_original_bytes(tmp_path):
    path = write_png(tmp_path / "a.png")
    ref = ImageRef.from_file(path)
    assert ref.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert ref.read() == path.read_bytes() and ref.name == "a.png"
    assert ref.open().mode == "RGB"


@pytest.mark.parametrize("size", [(12, 12), (20, 20)], ids=["over-limit-warning", "over-twice-limit-error"])
def test_decompression_bomb_limit_is_an_error(tmp_path, monkeypatch, size):
    path = write_png(tmp_path / "big.png", size=size)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    monkeypatch.setattr(images, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(ImageError, match="big.png"):
        ImageRef.from_file(path)


def test_truncated_and_missing_files_name_the_file(tmp_path):
    path = write_png(tmp_path / "t.png", size=(64, 64))
    path.write_bytes(path.read_bytes()[:60])
    with pytest.raises(ImageError, match="t.png"):
        ImageRef.from_file(path)
    with pytest.raises(ImageError, match="not found"):
        ImageRef.from_file(tmp_path / "nope.png")
    with pytest.raises(ImageError, match="not a decodable image"):
        decode(b"GIF89a nonsense", "x.gif")


def test_a_file_changed_after_admission_is_refused(tmp_path):
    path = write_png(tmp_path / "c.png")
    ref = ImageRef.from_file(path)
    write_png(path, colour=(0, 0, 0))
    with pytest.raises(ImageError, match="changed since it was admitted"):
        ref.read()
