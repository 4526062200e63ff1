"""Small embedded thumbnails of the sampled items' images.

An image is read from the path the build recorded when the file still holds the same bytes
(sha256), else from the dataset folder's shards, which keep every routed image by its sha256. The
image is decoded with the project's limits (images.decode), shrunk to fit THUMBNAIL_BOX and
encoded as PNG or JPEG, whichever is smaller: the same image always gives the same bytes.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ..files import image_format
from ..images import ImageError, ImageRef, decode
from ..parquetio import ShardTooLargeError, check_row_groups, open_parquet
from ..vocab import CONFIGS

THUMBNAIL_BOX = (192, 192)  # largest width and height of a thumbnail, in pixels
JPEG_QUALITY = 85


@dataclass(frozen=True)
class Thumbnail:
    data_uri: Optional[str]  # None when the image could not be found or decoded
    width: int = 0
    height: int = 0
    original: str = ""  # e.g. "640×480 PNG"
    problem: str = ""  # why there is no thumbnail


def thumbnail(data: bytes, name: str) -> Thumbnail:
    from PIL import Image

    try:
        image = decode(data, name)
    except ImageError as exc:
        return Thumbnail(None, problem=str(exc))
    original = f"{image.width}×{image.height}"
    fmt = _format_name(data)
    original += f" {fmt}" if fmt else ""
    image.thumbnail(THUMBNAIL_BOX, Image.Resampling.LANCZOS)  # decode() returned an image of our own
    mime, encoded = min(_encodings(image), key=lambda pair: len(pair[1]))
    uri = f"data:{mime};base64," + base64.b64encode(encoded).decode("ascii")
    return Thumbnail(uri, image.width, image.height, original)


def _format_name(data: bytes) -> Optional[str]:
    """Pillow's name of the image's format ("PNG", "JPEG", ...): from the leading bytes, or, for
    a format files.image_format does not know, from Pillow."""
    from PIL import Image

    known = image_format(data)
    if known is not None:
        return known[0].split("/", 1)[1].upper()  # "image/jpeg" -> "JPEG", as Pillow names it
    try:
        with Image.open(io.BytesIO(data)) as raw:
            return raw.format
    except Exception:  # decode() succeeded on these bytes; the format name is only a label
        return None


def _encodings(image) -> list[tuple[str, bytes]]:
    """The thumbnail as PNG (text, drawings) and as JPEG (photos); the page keeps the smaller."""
    out = []
    for mime, fmt, options in (("image/png", "PNG", {"optimize": True}),
                               ("image/jpeg", "JPEG", {"quality": JPEG_QUALITY})):
        buf = io.BytesIO()
        image.save(buf, format=fmt, **options)
        out.append((mime, buf.getvalue()))
    return out


def _from_file(path: Optional[str], sha256: str) -> Optional[bytes]:
    """The image's bytes from the file the build recorded, read with the project's guards (a
    size cap, no FIFO, a timeout); None when it is missing or no longer holds those bytes."""
    if not path:
        return None
    try:
        return ImageRef(path, sha256).read()
    except ImageError:
        return None


def _from_shards(folder: Path, wanted: set[str]) -> dict[str, bytes]:
    """Image bytes by sha256 from the dataset folder's shards (any config), for ``wanted``."""
    from ..dataset.info import shard_paths  # late: it imports `datasets`, needed only when a file is gone

    found: dict[str, bytes] = {}
    for shard in (shard for config in CONFIGS for shard in shard_paths(folder, config)):
        if not wanted - found.keys():
            break
        try:
            parquet = open_parquet(shard)
            if not {"image_sha256", "image"} <= set(parquet.schema_arrow.names):
                continue
            check_row_groups(shard, parquet, columns=("image_sha256", "image"))
            for group in range(parquet.num_row_groups):
                shas = parquet.read_row_group(group, columns=["image_sha256"]).column(0)
                mask = pc.is_in(shas, value_set=pa.array(sorted(wanted - found.keys()), type=pa.string()))
                if not pc.any(mask).as_py():
                    continue
                images = parquet.read_row_group(group, columns=["image"]).column(0).filter(mask)
                for sha, image in zip(shas.filter(mask).to_pylist(), images.to_pylist()):
                    if isinstance(image, dict) and isinstance(image.get("bytes"), bytes):
                        found.setdefault(sha, image["bytes"])
        except (OSError, pa.ArrowException, ShardTooLargeError):
            continue  # a damaged or oversized shard: validate reports it; the page shows what it can
    return found


def thumbnails(items: Iterable[tuple[Optional[str], str]], dataset: Path) -> dict[str, Thumbnail]:
    """A thumbnail per image sha256 of ``items`` ((recorded path, sha256) pairs)."""
    paths: dict[str, Optional[str]] = {}
    for path, sha in items:
        if sha and sha not in paths:
            paths[sha] = path
    data = {sha: _from_file(path, sha) for sha, path in paths.items()}
    missing = {sha for sha, d in data.items() if d is None}
    if missing:
        data.update(_from_shards(dataset, missing))
    out = {}
    for sha, path in paths.items():
        if data.get(sha) is None:
            out[sha] = Thumbnail(None, problem=f"image {sha[:12]}… not found: {path or 'no path recorded'} is "
                                               f"missing or changed, and no shard of the dataset holds it")
        else:
            out[sha] = thumbnail(data[sha], path or sha)
    return out
