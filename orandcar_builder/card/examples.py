"""The card's examples: the first, middle and last row of each config, compact. A row's own fields
(image, sha256, cleaning policy and actions) fit on one line; its QA items form a table, one
column per item (at most ``ITEMS_PER_TABLE`` side by side, then another table) and one line per
field, the item's source (``clean_meta.sources[i]``) below its own fields. A value is shown inline, in full, when it is short
(``INLINE_VALUE_MAX_CHARS``) and inline code shows it unambiguously: line breaks, tabs and other
control characters escaped (``\\n``, ``\\t``, ``markdown.code_span``), so the value must hold no
backslash of its own, nor a space at either end (inline code drops it); any other value is
named in its cell and shown in a folded block below the table, exactly. The row's image file is
stored beside the card (its original bytes, named by their format)."""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..dataset.info import shard_paths
from ..dataset.layout import EXAMPLES_DIR
from ..files import image_format
from ..parquetio import ShardTooLargeError, check_row_groups, open_parquet
from ..vocab import CONFIGS
from .errors import CardError
from .markdown import NAME_MAX_CHARS, bounded, code_span, fence

READ_BATCH_ROWS = 1024  # rows decoded at a time while looking for an example row in its row group
EXAMPLES_PER_CONFIG = 3  # first, middle and last row of each config
INLINE_VALUE_MAX_CHARS = 300  # longer values are shown in full in a folded block below the table
BLOCK_VALUE_MAX_CHARS = 4000  # a value shown below a table is cut here, with its full length stated
QA_ITEMS_SHOWN = 10  # QA items of one example row shown in the card; the rest are counted
ITEMS_PER_TABLE = 3  # QA items side by side in one table; more make more tables, never a wider one
_SAFE_EXTENSION = re.compile(r"^[a-z0-9]{1,5}$")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+$")
SOURCE_REF_KEYS = ("dataset", "split", "id")  # a source's reference, shown in one cell: dataset / split / id


def example_indices(rows: int) -> list[int]:
    """First, middle and last row (fewer when the config has fewer rows)."""
    return list(dict.fromkeys(i for i in (0, rows // 2, rows - 1) if 0 <= i < rows))[:EXAMPLES_PER_CONFIG]


def read_row(shards: list[Path], index: int) -> dict:
    for shard in shards:
        parquet = open_parquet(shard)
        if index >= parquet.metadata.num_rows:
            index -= parquet.metadata.num_rows
            continue
        try:
            check_row_groups(shard, parquet)
        except ShardTooLargeError as exc:
            raise CardError(f"{shard}: {exc}") from None
        for group in range(parquet.num_row_groups):
            n = parquet.metadata.row_group(group).num_rows
            if index < n:  # batch by batch: a row group may hold 100 MB (dataset.writer)
                for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=[group], use_threads=False):
                    if index < batch.num_rows:
                        return batch.slice(index, 1).to_pylist()[0]
                    index -= batch.num_rows
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
    facts: list[tuple[str, str]] = field(default_factory=list)  # the row's own fields: (label, markdown)
    # the QA tables: "columns" ("field", then one per QA item) and "lines" (a field, then its value per item)
    tables: list[dict] = field(default_factory=list)
    more: str = ""  # the QA items not shown, counted
    blocks: list[dict] = field(default_factory=list)  # long values: label, chars, text


def inline_fits(value: str) -> bool:
    """Whether ``value`` is shown inline, in full and unambiguously (see the module docstring)."""
    return len(value) <= INLINE_VALUE_MAX_CHARS and value == value.strip() and "\\" not in value


def _value_cell(label: str, value: Any, blocks: list[dict]) -> str:
    """The markdown of ``value`` in its cell: inline when it fits, else named there and added to
    ``blocks`` (its full text in a fence, cut at BLOCK_VALUE_MAX_CHARS with its length stated)."""
    if value is None:
        return "*null*"
    if not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False)
    if not value:
        return "*empty*"
    if inline_fits(value):
        return code_span(value)
    shown, cut = bounded(value, BLOCK_VALUE_MAX_CHARS)
    text = fence(shown)
    if cut:
        text += (f"\n\n*Cut here: the first {len(shown):,} of {len(value):,} characters are shown; "
                 f"the row holds the whole value.*")
    blocks.append({"label": label, "chars": len(value), "text": text})
    where = "the first " + f"{len(shown):,} below" if cut else "in full below"
    return f"{len(value):,} character{'' if len(value) == 1 else 's'}, {where}"


def _keys(records: list) -> list[str]:
    return list(dict.fromkeys(k for r in records if isinstance(r, dict) for k in r))


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
        ex.facts.append(("image", f"{code_span(image.get('path') or '', NAME_MAX_CHARS)} ({details}), shown above"))
    else:
        ex.facts.append(("image", "*no image bytes*"))
    ex.facts.append(("image_sha256", _value_cell("image_sha256", row.get("image_sha256"), ex.blocks)))
    meta = row.get("clean_meta") or {}
    ex.facts.append(("clean_meta.policy", _value_cell("clean_meta.policy", meta.get("policy"), ex.blocks)))
    ex.facts.append(("clean_meta.actions", _value_cell("clean_meta.actions", meta.get("actions") or [], ex.blocks)))
    qa = row.get("qa") or []
    sources = meta.get("sources") or []
    shown = max(len(qa), len(sources))
    n = min(shown, QA_ITEMS_SHOWN)
    items = [qa[i] if i < len(qa) and isinstance(qa[i], dict) else {} for i in range(n)]
    item_sources = [sources[i] if i < len(sources) and isinstance(sources[i], dict) else {} for i in range(n)]
    fields: list[tuple[str, list[str]]] = []  # (field heading, its cell per item)
    for key in _keys(items):
        fields.append((f"`{key}`" if _PLAIN_KEY.match(key) else code_span(key, NAME_MAX_CHARS),
                       [_value_cell(f"qa[{i}].{key}", item[key], ex.blocks) if key in item else "–"
                        for i, item in enumerate(items)]))
    source_keys = _keys(item_sources)
    if any(k in source_keys for k in SOURCE_REF_KEYS):
        fields.append(("source (" + " / ".join(f"`{k}`" for k in SOURCE_REF_KEYS) + ")",
                       [" / ".join(_value_cell(f"clean_meta.sources[{i}].{k}", source.get(k), ex.blocks)
                                   for k in SOURCE_REF_KEYS) for i, source in enumerate(item_sources)]))
    for key in source_keys:
        if key not in SOURCE_REF_KEYS:
            fields.append((code_span(f"source.{key}", NAME_MAX_CHARS),
                           [_value_cell(f"clean_meta.sources[{i}].{key}", source.get(key), ex.blocks)
                            for i, source in enumerate(item_sources)]))
    for start in range(0, n, ITEMS_PER_TABLE):
        shown_here = range(start, min(n, start + ITEMS_PER_TABLE))
        ex.tables.append({"columns": ["field", *(f"`qa[{i}]`" for i in shown_here)],
                          "lines": [[heading, *(cells[i] for i in shown_here)] for heading, cells in fields]})
    if shown > QA_ITEMS_SHOWN:
        ex.more = f"{shown - QA_ITEMS_SHOWN:,} more QA items, not shown"
    return ex


def examples(folder: Path, sizes: dict[str, dict]) -> dict[str, list[Example]]:
    out = {}
    for config in CONFIGS:
        rows = sizes[config]["rows"]
        out[config] = [example(folder, config, k, index, rows)
                       for k, index in enumerate(example_indices(rows), start=1)]
    return out
