"""Opening parquet files that are read whole, row group after row group, and bounding what a
row group of a shard from outside decodes to before any of it is read.

pyarrow's ``ParquetFile`` pre-buffers by default: it keeps the column chunks of every row group
it has read until the file object is dropped, so reading a file through holds memory in
proportion to the file (all of a 256 MiB shard in validate, all of work/decisions.parquet in
routing). Every reader that walks a whole file opens it here, without pre-buffering.

A shard is compressed: a 1 GB string of one repeated letter fits in 155 kB, and a dictionary
entry of 1 MB named by a million rows takes a few kB. ``check_row_groups`` refuses a shard whose
row group decodes to more than ``MAX_ROW_GROUP_BYTES`` (``ShardTooLargeError``), from the footer's
figures alone (each column chunk's ``total_uncompressed_size`` and ``num_values``): what a plainly
encoded column decodes to is its uncompressed size; a dictionary-encoded text column can decode to
up to ``num_values`` times that, so where the footer cannot rule it out, the column is read in
dictionary form (the dictionary and the indices: no more than the footer's figures) and the
decoded size counted exactly, one leaf column at a time. A shard is refused before its rows are
read.
"""

from __future__ import annotations

import os
from typing import IO, Iterable, Optional, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import OrandCarError

# What one row group of a dataset shard may decode to (Arrow bytes). Our writer bounds a row group
# by dataset.writer.ROW_GROUP_MAX_BYTES (100 MB of Arrow data, as datasets does), so ours stay
# under 100 MB unless one row alone is larger (an image of at most images.DEFAULT_MAX_IMAGE_BYTES,
# 64 MiB, and its text): 512 MiB leaves five times that, and bounds a reader (validate holds a row group
# about four times over: Arrow, Python objects, JSON) to about 2 GB whatever a shard claims.
MAX_ROW_GROUP_BYTES = 512 * 1024 * 1024
# Decoded bytes per value besides its own bytes: an offset, validity, the list offsets above it.
PER_VALUE_BYTES = 8
_FIXED_WIDTH = {"BOOLEAN": 1, "INT32": 4, "FLOAT": 4, "INT64": 8, "DOUBLE": 8, "INT96": 12}
# Encodings under which a value is not stored in full where it is used, so a column chunk can
# decode to many times its uncompressed size.
_SHARED_ENCODINGS = ("PLAIN_DICTIONARY", "RLE_DICTIONARY", "DELTA_BYTE_ARRAY")


class ShardTooLargeError(OrandCarError):
    """A shard whose row group would decode to more than the bound."""


def open_parquet(path: Union[str, os.PathLike]) -> pq.ParquetFile:
    """``pq.ParquetFile(path)`` that holds no more than the row group being read."""
    return pq.ParquetFile(path, pre_buffer=False)


def _top(chunk) -> str:
    return chunk.path_in_schema.split(".", 1)[0]


def _plain_size(parquet: pq.ParquetFile, chunk, index: int) -> int:
    """What a column chunk decodes to at least (and at most, unless its values are shared)."""
    if chunk.physical_type == "FIXED_LEN_BYTE_ARRAY":
        return chunk.num_values * (parquet.schema.column(index).length + PER_VALUE_BYTES)
    width = _FIXED_WIDTH.get(chunk.physical_type)
    if width is not None:
        return chunk.num_values * (width + PER_VALUE_BYTES)
    return chunk.total_uncompressed_size + chunk.num_values * PER_VALUE_BYTES


def _shared(chunk) -> bool:
    return chunk.physical_type == "BYTE_ARRAY" and any(e in _SHARED_ENCODINGS for e in chunk.encodings)


def _decoded_nbytes(array: pa.Array) -> int:
    """The Arrow size ``array`` has once its dictionary-encoded parts are decoded."""
    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = pc.binary_length(array.dictionary)
        total = pc.sum(pc.take(lengths, array.indices)).as_py() or 0
        return int(total) + len(array) * PER_VALUE_BYTES
    if pa.types.is_struct(kind):
        return sum(_decoded_nbytes(child) for child in array.flatten()) + len(array)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _decoded_nbytes(array.flatten()) + len(array) * PER_VALUE_BYTES
    return array.nbytes


def _measured(source, metadata, group: int, leaf: str) -> int:
    """The decoded size of the leaf column ``leaf`` (its path in the schema) of row group
    ``group``, read alone and in dictionary form (what the footer bounds): one leaf at a time, so a
    reader holds one column's dictionary and indices, not the row group's (up to 100 MB). The
    footer already read (``metadata``) is handed over, not read again."""
    reader = pq.ParquetFile(source, metadata=metadata, pre_buffer=False, read_dictionary=[leaf])
    table = reader.read_row_group(group, columns=[leaf], use_threads=False)
    return sum(_decoded_nbytes(chunk) for column in table.columns for chunk in column.chunks)


def check_row_groups(source: Union[str, os.PathLike, IO[bytes]], parquet: Optional[pq.ParquetFile] = None, *,
                     columns: Optional[Iterable[str]] = None, limit: Optional[int] = None) -> None:
    """Raise ``ShardTooLargeError`` when a row group of the parquet file ``source`` (``parquet``:
    the file already opened on it) would decode to more than ``limit`` bytes in ``columns`` (the
    top-level columns read; None: all; ``limit`` None: ``MAX_ROW_GROUP_BYTES``). See the module
    docstring for how it is known."""
    limit = MAX_ROW_GROUP_BYTES if limit is None else limit
    parquet = parquet if parquet is not None else open_parquet(source)
    meta = parquet.metadata
    wanted = None if columns is None else set(columns)
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        chunks = [(j, row_group.column(j)) for j in range(row_group.num_columns)]
        chunks = [(j, c) for j, c in chunks if wanted is None or _top(c) in wanted]
        sizes = {j: _plain_size(parquet, c, j) for j, c in chunks}
        base = sum(sizes.values())
        if base > limit:
            j, largest = max(chunks, key=lambda jc: sizes[jc[0]])
            raise ShardTooLargeError(
                f"row group {group} decodes to about {base:,} bytes ({largest.path_in_schema} alone "
                f"{sizes[j]:,}), more than the {limit:,} a row group may hold")
        shared = [c for _, c in chunks if _shared(c)]
        worst = base + sum(c.num_values * c.total_uncompressed_size for c in shared)
        if worst <= limit:
            continue
        if any("DELTA_BYTE_ARRAY" in c.encodings for c in shared):
            raise ShardTooLargeError(f"row group {group} may decode to up to {worst:,} bytes (delta-encoded text), "
                                     f"more than the {limit:,} a row group may hold")
        measured = base
        for j, chunk in chunks:
            if _shared(chunk) and measured <= limit:
                measured += _measured(source, meta, group, chunk.path_in_schema) - sizes[j]
        if measured > limit:
            raise ShardTooLargeError(f"row group {group} decodes to {measured:,} bytes (its text is dictionary-"
                                     f"encoded: repeated values stored once), more than the {limit:,} a row "
                                     "group may hold")
