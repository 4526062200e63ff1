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
up to ``num_values`` times that. Where the footer cannot rule it out, each such column's dictionary
page is read alone (the first value of the column chunk in dictionary form: the dictionary and
one index) for its longest entry: no value of the chunk decodes to more, so ``num_values`` times
that bounds it (our own shards, whose text rarely repeats, stop here: reading them costs a
dictionary page per column, not a row group). Only where that bound still exceeds the limit is
the column read whole in dictionary form (the dictionary and the indices: no more than the
footer's figures) and the decoded size counted exactly, one leaf column at a time; the reader
builds one dictionary for the whole chunk then, which costs memory in the row group's size. A
shard is refused before its rows are read. A dictionary page's longest entry is kept by the page's
content (its compressed bytes' digest), so the readers of one build's shards (card, validate,
review) walk each page once: the page is still read and its digest taken on every check.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections import OrderedDict
from typing import IO, Iterable, Iterator, Optional, Union

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


def nested_arrays(array: pa.Array) -> Iterator[pa.Array]:
    """``array`` and every array inside it, depth first: a struct's fields, a list's values."""
    yield array
    kind = array.type
    if pa.types.is_struct(kind):
        for i in range(kind.num_fields):
            yield from nested_arrays(array.field(i))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        yield from nested_arrays(array.values)


def is_nested(kind: pa.DataType) -> bool:
    """Whether arrays of ``kind`` hold others (``nested_arrays`` descends into them)."""
    return pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind)


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


# parquet's PageHeader (thrift compact protocol): the fields read; PageType DICTIONARY_PAGE.
_PAGE_TYPE, _PAGE_UNCOMPRESSED, _PAGE_COMPRESSED, _PAGE_DICTIONARY_HEADER = 1, 2, 3, 7
_DICTIONARY_PAGE = 2
_PLAIN_ENCODINGS = (0, 2)  # a dictionary page's entries: PLAIN, or PLAIN_DICTIONARY in older files
_HEADER_READ = 4096  # bytes read for a page header (ours are under 40)
# Footer codec -> pyarrow.Codec name, for the codecs whose page framing pyarrow's codec reads.
# parquet's LZ4 pages: Hadoop's framing (two big-endian sizes before the raw block) or a raw block.
_CODECS = {"SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli", "ZSTD": "zstd", "LZ4_RAW": "lz4_raw",
           "LZ4": "lz4_raw"}


class _Thrift:
    """Just enough of thrift's compact protocol to read a page header's integers."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def byte(self) -> int:
        if self.at >= len(self.data):
            raise ValueError("page header cut short")
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def int(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def struct(self, depth: int = 0) -> dict:
        """A struct's integer fields (and nested structs) by id; the rest skipped."""
        if depth > 8:
            raise ValueError("page header nested too deep")
        fields, last = {}, 0
        while True:
            head = self.byte()
            if head == 0:
                return fields
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.int()
            fields[last] = self._value(kind, depth)

    def _value(self, kind: int, depth: int):
        if kind in (1, 2):  # bool true / false, held in the type
            return kind == 1
        if kind == 3:
            return self.byte()
        if kind in (4, 5, 6):  # i16, i32, i64
            return self.int()
        if kind == 7:  # double
            self.at += 8
            return None
        if kind == 8:  # binary
            self.at += self.varint()
            return None
        if kind in (9, 10):  # list, set
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(size):
                self._value(head & 0x0F, depth + 1)
            return None
        if kind == 12:
            return self.struct(depth + 1)
        raise ValueError(f"page header field of thrift type {kind}")


# The longest entry of dictionary pages already walked, by (codec, sizes, entries, digest of the
# page's stored bytes); the oldest are forgotten first.
LONGEST_KEPT = 1024
_LONGEST: "OrderedDict[tuple, Optional[int]]" = OrderedDict()


def _longest_entry(source, chunk) -> Optional[int]:
    """Bytes of the longest entry of the dictionary page of the column chunk ``chunk`` (its
    metadata): every dictionary-encoded value of the chunk is one of them. The page is read alone
    (its header, then its bytes, decompressed: at most the chunk's uncompressed size). None where it
    cannot be read so (no dictionary page, a codec pyarrow reads in other framing, a header that does
    not parse): the caller then counts the chunk exactly."""
    codec = _CODECS.get(chunk.compression) if chunk.compression != "UNCOMPRESSED" else ""
    if not chunk.has_dictionary_page or codec is None:
        return None
    handle = open(source, "rb") if isinstance(source, (str, os.PathLike)) else source
    try:
        handle.seek(chunk.dictionary_page_offset)
        reader = _Thrift(handle.read(_HEADER_READ))
        header = reader.struct()
        uncompressed, compressed = header.get(_PAGE_UNCOMPRESSED), header.get(_PAGE_COMPRESSED)
        dictionary = header.get(_PAGE_DICTIONARY_HEADER)
        if (header.get(_PAGE_TYPE) != _DICTIONARY_PAGE or not isinstance(dictionary, dict)
                or dictionary.get(2) not in _PLAIN_ENCODINGS
                or not isinstance(uncompressed, int) or not isinstance(compressed, int)
                or not 0 <= uncompressed <= chunk.total_uncompressed_size or not 0 <= compressed <= chunk.total_compressed_size):
            return None
        handle.seek(chunk.dictionary_page_offset + reader.at)
        data = handle.read(compressed)
        if len(data) != compressed:
            return None
        key = (chunk.compression, uncompressed, dictionary.get(1), hashlib.blake2b(data, digest_size=20).digest())
        if key in _LONGEST:
            _LONGEST.move_to_end(key)
            return _LONGEST[key]
        if chunk.compression == "LZ4":  # Hadoop's framing, or a raw block (what Arrow writes)
            data = _unframe_hadoop(data, uncompressed) or data
        if codec:
            data = pa.Codec(codec).decompress(data, decompressed_size=uncompressed).to_pybytes()
        longest = _longest_plain(data, dictionary.get(1))
        _LONGEST[key] = longest
        while len(_LONGEST) > LONGEST_KEPT:
            _LONGEST.popitem(last=False)
        return longest
    except (ValueError, OSError, pa.ArrowException):
        return None
    finally:
        if handle is not source:
            handle.close()


def _unframe_hadoop(data: bytes, uncompressed: int) -> Optional[bytes]:
    """The raw LZ4 block of a page in Hadoop's framing (one block: its decompressed and compressed
    sizes, big-endian, then the block); None when ``data`` is not so framed."""
    if len(data) < 8:
        return None
    size, block = struct.unpack_from(">II", data)
    return data[8:] if size == uncompressed and block == len(data) - 8 else None


_LENGTH = struct.Struct("<I")


def _longest_plain(data: bytes, count) -> Optional[int]:
    """The longest of ``count`` PLAIN byte arrays (a 4-byte length, then the bytes) in ``data``."""
    if not isinstance(count, int) or count < 0:
        return None
    longest, at, unpack = 0, 0, _LENGTH.unpack_from
    try:
        for _ in range(count):  # a length past the end of ``data`` fails the unpack that follows it
            (length,) = unpack(data, at)
            at += 4 + length
            if length > longest:
                longest = length
    except struct.error:
        return None
    return longest if at <= len(data) else None


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
        # A value named by the dictionary is one of its entries: at most the longest one.
        longest = {j: _longest_entry(source, c) for j, c in chunks if _shared(c)}
        if None not in longest.values() and base + sum(c.num_values * longest[j] for j, c in chunks
                                                      if j in longest) <= limit:
            continue
        measured = base
        for j, chunk in chunks:
            if j in longest and measured <= limit:
                measured += _measured(source, meta, group, chunk.path_in_schema) - sizes[j]
        if measured > limit:
            raise ShardTooLargeError(f"row group {group} decodes to {measured:,} bytes (its text is dictionary-"
                                     f"encoded: repeated values stored once), more than the {limit:,} a row "
                                     "group may hold")


def row_group_nbytes(parquet: pq.ParquetFile, group: int) -> int:
    """The Arrow size of row group ``group`` as a reader of the whole row group has it (what
    ``datasets`` records as a split's ``num_bytes``), read a column at a time: memory holds one
    column of the row group, not the row group (up to the writer's 100 MB)."""
    return sum(parquet.read_row_group(group, columns=[name]).nbytes for name in parquet.schema_arrow.names)
