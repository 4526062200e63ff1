"""The card's examples: the first, middle and last row of each config, each field shown in a
table cell or, when long, in a block below it, and the row's image file stored beside the card
(its original bytes, named by their format)."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pyarrow.parquet as pq

from ..dataset.info import shard_paths
from ..dataset.layout import EXAMPLES_DIR
from ..files import image_format
from ..parquetio import ShardTooLargeError, check_row_groups
from ..vocab import CONFIGS
from .errors import CardError
from .markdown import NAME_MAX_CHARS, bounded, code_span, fence

EXAMPLES_PER_CONFIG = 3  # first, middle and last row of each config
TABLE_VALUE_MAX_CHARS = 120  # longer (or multi-line) values are shown in full below the table
BLOCK_VALUE_MAX_CHARS = 4000  # a value shown below a table is cut here, with its full length stated
QA_ITEMS_SHOWN = 10  # QA items of one example row shown in the card; the rest are counted
_SAFE_EXTENSION = re.compile(r"^[a-z0-9]{1,5}$")


def example_indices(rows: int) -> list[int]:
    """First, middle and last row (fewer when the config has fewer rows)."""
    return list(dict.fromkeys(i for i in (0, rows // 2, rows - 1) if 0 <= i < rows))[:EXAMPLES_PER_CONFIG]


def read_row(shards: list[Path], index: int) -> dict:
    for shard in shards:
        parquet = pq.ParquetFile(shard)
        if index >= parquet.metadata.num_rows:
            index -= parquet.metadata.num_rows
            continue
        try:
            check_row_groups(shard, parquet)
        except ShardTooLargeError as exc:
            raise CardError(f"{shard}: {exc}") from None
        for group in range(parquet.num_row_groups):
            n = parquet.metadata.row_group(group).num_rows
            if index < n:
                return parquet.read_row_group(group).slice(index, 1).to_pylist()[0]
            index -= n
    raise IndexError(index)


def image_extension(data: bytes, path: Optional[str]) -> tuple[str, str]:
    """(extension, format name) of image bytes: from the bytes' signature where it names a format
    (``files.image_format``), else from the stored file name."""
    known = image_format(data)
    if known is not None:
        mime, ext = known
        return ext.lstrip("."), mime.split("/", 1)[1].upper()
    suffix = Path(path or "").suffix.lower().lstrip(".")
    return (suffix if _SAFE_EXTENSION.match(suffix) else "bin"), (suffix.upper() or "unknown")


def image_dimensions(data: bytes) -> Optional[str]:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return f"{image.width}×{image.height}"
    except Exception:
        return None


@dataclass
class Example:
    config: str
    number: int
    index: int
    rows: int
    image_file: Optional[str]
    image_bytes: Optional[bytes] = field(repr=False, default=None)
    cells: list[tuple[str, str]] = field(default_factory=list)
    blocks: list[dict] = field(default_factory=list)


def _value_cell(label: str, value: Any, blocks: list[dict], *, always_block: bool = False) -> tuple[str, str]:
    if value is None:
        return label, "*null*"
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    fits = (len(value) <= TABLE_VALUE_MAX_CHARS and value == value.strip() and "\n" not in value
            and "\r" not in value and "\t" not in value)
    if always_block or not fits:
        shown, cut = bounded(value, BLOCK_VALUE_MAX_CHARS)
        text = fence(shown) if value else None
        if cut:
            text += (f"\n\n*Cut here: the first {len(shown):,} of {len(value):,} characters are shown; "
                     f"the row holds the whole value.*")
        blocks.append({"label": label, "chars": len(value), "text": text})
        where = "the first " + f"{len(shown):,} below" if cut else "in full below"
        return label, f"{len(value):,} character{'' if len(value) == 1 else 's'}, {where}"
    return label, code_span(value) if value else "*empty*"


def example(folder: Path, config: str, number_: int, index: int, rows: int) -> Example:
    row = read_row(shard_paths(folder, config), index)
    image = row.get("image") or {}
    data = image.get("bytes") if isinstance(image, dict) else None
    ex = Example(config=config, number=number_, index=index, rows=rows, image_file=None)
    if isinstance(data, (bytes, bytearray)):
        ext, fmt = image_extension(bytes(data), image.get("path"))
        ex.image_file = f"{EXAMPLES_DIR}/{config}-{number_}.{ext}"
        ex.image_bytes = bytes(data)
        details = ", ".join(x for x in (fmt, image_dimensions(bytes(data)), f"{len(data):,} bytes") if x)
        ex.cells.append(("image", f"{code_span(image.get('path') or '', NAME_MAX_CHARS)} ({details}), shown above"))
    else:
        ex.cells.append(("image", "*no image bytes*"))
    ex.cells.append(_value_cell("image_sha256", row.get("image_sha256"), ex.blocks))
    qa = row.get("qa") or []
    for i, item in enumerate(qa[:QA_ITEMS_SHOWN]):
        prefix = f"qa[{i}]." if len(qa) > 1 else "qa."
        for key, value in item.items():
            ex.cells.append(_value_cell(prefix + key, value, ex.blocks, always_block=key == "wrong_vlm"))
    if len(qa) > QA_ITEMS_SHOWN:
        ex.cells.append((f"qa[{QA_ITEMS_SHOWN}:]", f"{len(qa) - QA_ITEMS_SHOWN:,} more QA items, not shown"))
    meta = row.get("clean_meta") or {}
    ex.cells.append(_value_cell("clean_meta.policy", meta.get("policy"), ex.blocks))
    sources = meta.get("sources") or []
    for i, source in enumerate(sources[:QA_ITEMS_SHOWN]):
        for key, value in (source.items() if isinstance(source, dict) else [("", source)]):
            ex.cells.append(_value_cell(f"clean_meta.sources[{i}].{key}".rstrip("."), value, ex.blocks))
    ex.cells.append(_value_cell("clean_meta.actions", meta.get("actions") or [], ex.blocks))
    return ex


def examples(folder: Path, sizes: dict[str, dict]) -> dict[str, list[Example]]:
    out = {}
    for config in CONFIGS:
        rows = sizes[config]["rows"]
        out[config] = [example(folder, config, k, index, rows)
                       for k, index in enumerate(example_indices(rows), start=1)]
    return out
