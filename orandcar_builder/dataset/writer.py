"""The Hub-layout writer: ``<config>/train-XXXXX-of-YYYYY.parquet`` shards.

Each shard is a parquet file whose schema carries the datasets features metadata, so
``load_dataset(folder, config)`` returns the documented features without a ``dataset_info``.
Row groups are bounded by bytes, not rows, as datasets bounds the ones it writes for the Hub
(``config.MAX_ROW_GROUP_SIZE``, 100 MB of Arrow data, and no fixed row count for image datasets):
a fixed 100 rows gave shards of small images thousands of row groups, a footer of megabytes and a
slow ``load_dataset``. Rows become Arrow CONVERT_ROWS at a time (fewer where their estimated size
would pass CONVERT_BYTES or a sixteenth of the bound; a larger row is a chunk of its own), so
Python objects are held for a few rows only (the write stage hands rows already made as Arrow
columns, ``write_columns``, and a chunk is then cut from them: the same chunks, the same bytes);
the Arrow chunks gather into the open row group, which is written out before a chunk would take
its Arrow size past ROW_GROUP_MAX_BYTES. A row group exceeds the bound only when one chunk alone
does (one row of an image larger than the bound). A row group that grows past SPILL_BYTES waits
on disk, in unnamed files in the config's folder (``_GroupSpill``). A row group is written a leaf
column at a time (``leafwise.LeafwiseWriter``): one held in memory is combined a column at a time as it is written; one spilled is read back a
leaf at a time from its files mapped into memory, so memory holds one leaf column of the row group
(``qa``'s questions, the largest), not the row group (nor thousands of chunks of it). A shard is closed once its rows reach
the shard's byte bound, and a reader's row group stays within ``parquetio.MAX_ROW_GROUP_BYTES``.
Shards are written under temporary names and renamed once their total is known. Nothing here
depends on the clock or the machine: the same rows give the same bytes (the leaf-wise writer gives
the bytes pyarrow's ``ParquetWriter`` gives for the row group as one contiguous table, so a shard
whose rows fit in one row group has the same bytes as writing them with one ``pq.write_table``).

Like datasets' ``ArrowWriter``, the writer counts what it writes: per shard the rows, the file's
bytes and the Arrow size of its row groups (the ``num_bytes`` of a card's ``dataset_info``), so
the card states them without reading the shards back (see ``info.written_sizes``). The Arrow size
counted from the tables written is the size a reader gets back for every row without a null
struct (an image, a QA item or clean_meta that is null: no valid row has one; the parquet reader
then gives the struct's fields validity bitmaps of their own, a few bytes more).
"""

from __future__ import annotations

import mmap
import os
import shutil
import tempfile
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generator, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from ..files import naming
from ..vocab import CONFIGS, SPLIT, shard_name
from .features import features
from .leafwise import LeafwiseWriter, column_leaves, leaves, table_columns

if TYPE_CHECKING:
    from ..route.columns import ConfigRows

DEFAULT_MAX_SHARD_BYTES = 256 * 1024 * 1024
# The Arrow bytes a row group may hold: datasets' config.MAX_ROW_GROUP_SIZE ("100MB", decimal).
ROW_GROUP_MAX_BYTES = 100 * 1000 * 1000
# Rows held as Python objects before they become one Arrow chunk of the row group: this many, or
# fewer where their estimated size (_row_bytes) would pass CONVERT_BYTES.
CONVERT_ROWS = 100
CONVERT_BYTES = 1024 * 1024
# The open row group's chunks are combined into one batch and spilled to disk (``_GroupSpill``)
# once they hold this many Arrow bytes: a row group that reaches it is kept on disk until it is
# written, not in memory as thousands of small chunks.
SPILL_BYTES = 8 * 1024 * 1024


# What a row's size estimate adds to its image and QA text (``_row_bytes``).
_ROW_OVERHEAD = 256


def _row_bytes(row: dict) -> int:
    qa_text = 0
    for qa in row["qa"]:  # len(str(v)) of every value; a plain str is its own str (the common case, asked first)
        for value in qa.values():
            qa_text += len(value) if value.__class__ is str else len(str(value))
    return len(row["image"]["bytes"]) + qa_text + _ROW_OVERHEAD


def _chunk_of_columns(pending: list[tuple], schema: pa.Schema) -> pa.Table:
    """The chunk of rows written by ``write_columns`` (``(rows, index, data, name)`` each, in
    order): the image column from their bytes and names, the others concatenated from slices of
    their ``rows``' columns into arrays of their own (``pa.concat_arrays``: offset 0, and a
    validity bitmap only where a value is null, as ``from_pylist`` makes them; so the chunk's
    Arrow size, which bounds the row groups, is that of the same rows as dicts)."""
    runs: list[list] = []  # [rows, first index, end index] of consecutive rows of one ConfigRows
    for rows, index, _, _ in pending:
        if runs and runs[-1][0] is rows and runs[-1][2] == index:
            runs[-1][2] += 1
        else:
            runs.append([rows, index, index + 1])
    image_type = schema.field("image").type
    image = pa.StructArray.from_arrays(
        [pa.array([row[2] for row in pending], image_type.field("bytes").type),
         pa.array([row[3] for row in pending], image_type.field("path").type)], fields=list(image_type))
    columns = [image]
    trim = any(rows.bitmaps for rows, _, _ in runs)
    for name in schema.names[1:]:
        parts = []
        for rows, start, end in runs:
            parts.extend(rows.table.column(name).slice(start, end - start).chunks)
        column = pa.concat_arrays(parts)
        columns.append(_without_empty_bitmaps(column) if trim else column)
    return pa.Table.from_arrays(columns, schema=schema)


def _without_empty_bitmaps(array: pa.Array) -> pa.Array:
    """``array`` (at offset 0, as ``pa.concat_arrays`` makes it) without the validity bitmap of any
    array in it that holds no null: a slice of rows without a null keeps the bitmap of the window
    it was cut from, where ``from_pylist`` makes none (one byte per 8 rows of Arrow size)."""
    return _trimmed(array)[0]


def _trimmed(array: pa.Array) -> tuple[pa.Array, bool]:
    """(``array`` without its empty bitmaps, whether it had any)."""
    kind = array.type
    if pa.types.is_struct(kind):
        children, own = [_trimmed(array.field(i)) for i in range(kind.num_fields)], 1
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        children, own = [_trimmed(array.values)], 2
    else:
        children, own = [], len(array.buffers())
    buffers = array.buffers()[:own]
    empty = buffers[0] is not None and not array.null_count
    if not empty and not any(changed for _, changed in children):
        return array, False
    if empty:
        buffers[0] = None
    return pa.Array.from_buffers(kind, len(array), buffers, null_count=array.null_count, offset=array.offset,
                                 children=[child for child, _ in children] or None), True


@dataclass
class ShardWritten:
    """What one shard holds, counted while it was written."""

    path: str  # relative to the dataset folder once the shard has its final name
    rows: int
    bytes: int  # the parquet file's size
    arrow_bytes: int  # in-memory (Arrow) size of its row groups, as a reader gets them back


@dataclass
class ConfigWriter:
    """Writes one config's rows into bounded shards; a context manager like datasets' ArrowWriter."""

    folder: Path
    config: str
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    _pending: list[dict] = field(default_factory=list)  # rows not yet turned into Arrow
    _pending_bytes: int = 0  # the byte rule's estimate of those rows
    _group: list[pa.Table] = field(default_factory=list)  # Arrow chunks of the row group not spilled yet
    _group_arrow_bytes: int = 0  # the Arrow size of the row group's chunks, spilled ones included
    _unspilled_bytes: int = 0  # the Arrow size of ``_group``
    _spill: Optional["_GroupSpill"] = None  # the row group's spilled columns (none while it is small)
    _shard: Optional["_Shard"] = None
    _shard_bytes: int = 0  # the byte rule's estimate of the open shard (see _row_bytes)
    _shard_rows: int = 0
    _shard_arrow_bytes: int = 0
    _temp_shards: list[Path] = field(default_factory=list)
    _counted: list[tuple[int, int]] = field(default_factory=list)  # (rows, Arrow bytes) of each closed shard
    rows: int = 0
    qa: int = 0
    shards: list[ShardWritten] = field(default_factory=list)  # filled by finalize()

    def __post_init__(self) -> None:
        self.schema = features(self.config).arrow_schema
        self.dir = Path(self.folder) / self.config
        self.dir.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> "ConfigWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            if self._spill is not None:
                self._spill.close()
                self._spill = None
            if self._shard is not None:
                self._shard.abort()
                self._shard = None
            for path in self._temp_shards:
                path.unlink(missing_ok=True)

    def write(self, row: dict) -> None:
        self._add(row, _row_bytes(row), len(row["qa"]))

    def write_columns(self, rows: "ConfigRows", index: int, data: bytes, name: str) -> None:
        """Write row ``index`` of ``rows`` (``route.columns``: the row but its image) with its
        image's bytes ``data`` and file name ``name``: the shards ``write`` gives for the row as a
        dict (the same estimate of its size, the same chunks, row groups and shards); the chunk is
        made from slices of ``rows``' columns, not from Python objects. A writer takes its rows
        one way or the other, not both."""
        self._add((rows, index, data, name), len(data) + rows.text[index] + _ROW_OVERHEAD, rows.qa[index])

    def _add(self, pending, size: int, qa: int) -> None:
        """One row (a dict, or ``write_columns``' tuple) of estimated ``size`` holding ``qa`` items."""
        if self._shard is None:
            self._shard = _Shard(self._next_temp_shard(), self.schema)
        convert_bytes = min(CONVERT_BYTES, ROW_GROUP_MAX_BYTES // 16)  # chunks well under the bound
        if self._pending and self._pending_bytes + size > convert_bytes:
            self._convert()  # a large image starts a chunk of its own
        self._pending.append(pending)
        self._shard_bytes += size
        self._pending_bytes += size
        self.rows += 1
        self.qa += qa
        if len(self._pending) >= CONVERT_ROWS or self._pending_bytes >= convert_bytes:
            self._convert()
        if self._shard_bytes >= self.max_shard_bytes:
            self._close_shard()

    def _next_temp_shard(self) -> Path:
        """The hidden name a shard is written under until the config's shard count is known."""
        path = self.dir / f".{SPLIT}-{len(self._temp_shards):05d}.parquet.partial"
        self._temp_shards.append(path)
        return path

    def _convert(self) -> None:
        """Turn the pending rows into one Arrow chunk of the row group, writing the row group out
        first when the chunk would take it past ROW_GROUP_MAX_BYTES."""
        if not self._pending:
            return
        if type(self._pending[0]) is tuple:
            chunk = _chunk_of_columns(self._pending, self.schema)
        else:
            chunk = pa.Table.from_pylist(self._pending, schema=self.schema)
        self._pending, self._pending_bytes = [], 0
        if self._group_open() and self._group_arrow_bytes + chunk.nbytes > ROW_GROUP_MAX_BYTES:
            self._write_group()
        self._group.append(chunk)
        self._group_arrow_bytes += chunk.nbytes
        self._unspilled_bytes += chunk.nbytes
        if self._unspilled_bytes >= SPILL_BYTES:
            if self._spill is None:
                self._spill = _GroupSpill(self.schema, self.dir)
            with naming(self.dir):
                self._spill.append(_combined(self._take_group()))

    def _group_open(self) -> bool:
        return bool(self._group) or self._spill is not None

    def _take_group(self) -> list[pa.Table]:
        chunks, self._group, self._unspilled_bytes = self._group, [], 0
        return chunks

    def _write_group(self) -> None:
        if self._group_open():
            sizes: list[int] = []
            rows, columns = self._leaves(sizes)
            try:
                with naming(self._temp_shards[-1]):
                    self._shard.writer.write_row_group(rows, columns)
            finally:
                columns.close()  # a spill's files are closed now, not when the error is let go
            self._shard_rows += rows
            self._shard_arrow_bytes += sum(sizes)  # a reader's row group is contiguous too
            self._group_arrow_bytes = 0

    def _leaves(self, sizes: list[int]) -> tuple[int, Generator[tuple[pa.Field, pa.Array], None, None]]:
        """The row group's rows and its leaf columns, one contiguous array at a time in the file's
        order; each column's Arrow size as one contiguous array (a reader's) is appended to
        ``sizes``. A row group that stayed under SPILL_BYTES is combined a column at a time from its
        chunks in memory; a larger one is read back from its spill a leaf at a time
        (``_GroupSpill``)."""
        chunks = self._take_group()
        if self._spill is None:
            table = pa.concat_tables(chunks)
            del chunks[:]
            return table.num_rows, leaves(self.schema, _sized(table_columns(table), sizes))
        spill, self._spill = self._spill, None
        with naming(self.dir):
            if chunks:
                spill.append(_combined(chunks))  # empties ``chunks``: the spill holds them
        return spill.rows, spill.leaves(sizes)

    def _close_shard(self) -> None:
        self._convert()
        self._write_group()
        with naming(self._temp_shards[-1]):
            self._shard.close()
        self._counted.append((self._shard_rows, self._shard_arrow_bytes))
        self._shard, self._shard_bytes, self._shard_rows, self._shard_arrow_bytes = None, 0, 0, 0

    def finalize(self) -> list[Path]:
        """Close the open shard, give the shards their final names; returns them (and records
        what each holds in ``shards``). An empty config gets one empty shard so that its
        ``configs:`` entry still resolves."""
        if self._shard is not None:
            self._close_shard()
        if not self._temp_shards:
            path = self._next_temp_shard()
            pq.write_table(self.schema.empty_table(), path, compression="snappy")
            self._counted.append((0, 0))
        total = len(self._temp_shards)
        final = []
        for index, (temp, (rows, arrow_bytes)) in enumerate(zip(self._temp_shards, self._counted)):
            target = self.dir / shard_name(index, total)
            os.replace(temp, target)
            final.append(target)
            self.shards.append(ShardWritten(path=f"{self.config}/{target.name}", rows=rows,
                                            bytes=target.stat().st_size, arrow_bytes=arrow_bytes))
        self._temp_shards, self._counted = [], []
        return final


def _combined(chunks: list[pa.Table]) -> pa.Table:
    """``chunks`` as one table of one chunk per column, combined a column at a time: memory holds
    the chunks and one column twice."""
    table = pa.concat_tables(chunks)
    schema = table.schema
    del chunks[:]
    arrays = []
    while table.num_columns:
        arrays.append(table.column(0).combine_chunks())
        table = table.remove_column(0)
    return pa.Table.from_arrays(arrays, schema=schema)


def _sized(columns: Iterable[pa.Array], sizes: list[int]) -> Iterator[pa.Array]:
    """``columns`` as they come, each one's Arrow size appended to ``sizes``."""
    for column in columns:
        sizes.append(column.nbytes)
        yield column
        del column


class _Shard:
    """An open shard: its file and the writer that writes its row groups a leaf column at a time
    (``leafwise.LeafwiseWriter``: the bytes of ``pq.ParquetWriter``, one column in memory)."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.handle = open(path, "wb")
        try:
            self.writer = LeafwiseWriter(self.handle, schema, compression="snappy")
        except BaseException:
            self.handle.close()
            raise

    def close(self) -> None:
        with self.handle:
            self.writer.close()

    def abort(self) -> None:
        self.handle.close()


class _GroupSpill:
    """A row group's columns on disk while it fills: one unnamed file per column (gone when closed,
    or when the process ends), an Arrow IPC stream of the column's batches.

    Held in memory as it fills, a row group near its 100 MB bound took about 1.4 times its Arrow
    size in resident memory (thousands of chunks of a few rows each, every one of them dozens of
    small buffers). Here each batch of SPILL_BYTES is combined and written out; ``leaves()`` maps
    the files back one at a time, in schema order, and combines each leaf column from the batches'
    pages (dropped from resident memory after each leaf), so memory holds one leaf combined and
    the pages it was read from, not the row group.
    The leaves are equal value for value to those of the row group combined in memory, and the
    shard writer writes the same bytes from them."""

    def __init__(self, schema: pa.Schema, directory: Path):
        self.schemas = [pa.schema([column]) for column in schema]
        self.files: list = []
        self.writers: list = []
        self.rows = 0
        try:
            for column_schema in self.schemas:
                handle = tempfile.TemporaryFile(dir=directory, prefix=".spill-")
                self.files.append(handle)
                self.writers.append(pa.ipc.new_stream(handle, column_schema))
        except BaseException:
            self.close()
            raise

    def append(self, table: pa.Table) -> None:
        """Write one combined table's columns (one chunk each) to their files."""
        for column, writer, schema in zip(table.columns, self.writers, self.schemas):
            for chunk in column.chunks:
                writer.write_batch(pa.record_batch([chunk], schema=schema))
        self.rows += table.num_rows

    def leaves(self, sizes: list[int]) -> Iterator[tuple[pa.Field, pa.Array]]:
        """The row group's leaf columns in the file's order, each one contiguous array combined
        when asked for (``leafwise.column_leaves``); each column's Arrow size as one contiguous
        array is appended to ``sizes``. A column's file is mapped into memory, not read: its batches
        are the file's pages, and only the pages of the leaf being combined are read. The spill is
        closed once every leaf is taken (or the taking stops)."""
        try:
            for writer in self.writers:
                writer.close()
            for handle, schema in zip(self.files, self.schemas):
                handle.flush()
                mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                try:
                    buffer = pa.py_buffer(mapped)
                    with pa.ipc.open_stream(pa.BufferReader(buffer)) as reader:
                        chunks = [batch.column(0) for batch in reader]
                    del reader, buffer
                    for leaf in column_leaves(schema.field(0), chunks, sizes):
                        yield leaf
                        del leaf
                        _release_pages(mapped)
                    del chunks
                finally:
                    try:
                        mapped.close()
                    except BufferError:  # an array still refers to it (the taking stopped): unmapped with the last
                        pass
                handle.close()
        finally:
            self.close()

    def close(self) -> None:
        for handle in self.files:
            handle.close()
        self.files, self.writers = [], []


def _release_pages(mapped: mmap.mmap) -> None:
    """Drop the pages of ``mapped`` read so far from this process's resident memory (they stay in
    the page cache and are read again if touched: the mapping is of a file, read-only), so a
    column's leaves do not add up to the column."""
    if hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)


class DatasetWriter:
    """The three configs' writers open at once, so that rows of several configs made together
    (``RS_think`` and ``RS_nothink`` from the same accepted items) are written as they are made;
    each config's shards depend on its own rows only, so writing them interleaved gives the bytes
    of writing them one config after the other (or in another process: ``configs``, the ones
    this writer writes, all by default). A context manager: on an error every config's
    temporary shards are removed; ``summary()`` after the block (see ``write_dataset``)."""

    def __init__(self, folder: Path, *, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
                 configs: tuple[str, ...] = CONFIGS):
        self.folder = Path(folder)
        self.configs = configs
        self.max_shard_bytes = max_shard_bytes
        self._stack = ExitStack()
        self.writers: dict[str, ConfigWriter] = {}
        self._finished: set[str] = set()  # configs whose shards are written (``finish``)

    def __enter__(self) -> "DatasetWriter":
        self.folder.mkdir(parents=True, exist_ok=True)
        with ExitStack() as stack:
            for config in self.configs:
                target = self.folder / config
                if target.exists():
                    shutil.rmtree(target)
                self.writers[config] = stack.enter_context(ConfigWriter(self.folder, config, self.max_shard_bytes))
            self._stack = stack.pop_all()
        return self

    def write(self, config: str, row: dict) -> None:
        self.writers[config].write(row)

    def schema(self, config: str) -> pa.Schema:
        """``config``'s Arrow schema, its shards'."""
        return self.writers[config].schema

    def write_columns(self, rows: "ConfigRows", index: int, data: bytes, name: str) -> None:
        """``ConfigWriter.write_columns`` for ``rows``' config."""
        self.writers[rows.config].write_columns(rows, index, data, name)

    def finish(self, config: str) -> None:
        """``config`` has all its rows: its open row group and shard are written now (so memory
        holds only the row groups of configs still being written), and it takes no more rows."""
        if config not in self._finished:
            self._finished.add(config)
            self.writers[config].finalize()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                for config in self.writers:
                    self.finish(config)
            except BaseException as error:  # the writers remove their temporary shards
                if not self._stack.__exit__(type(error), error, error.__traceback__):
                    raise
                return
        self._stack.__exit__(exc_type, exc, tb)  # with the block's error, each writer removes its shards

    def summary(self) -> dict[str, dict]:
        return {config: _summary(writer) for config, writer in self.writers.items()}


def _summary(writer: ConfigWriter) -> dict:
    return {
        "rows": writer.rows,
        "qa": writer.qa,
        "shards": [shard.path for shard in writer.shards],
        "bytes": sum(shard.bytes for shard in writer.shards),
        "arrow_bytes": sum(shard.arrow_bytes for shard in writer.shards),
        "shard_sizes": [asdict(shard) for shard in writer.shards],
    }


def write_dataset(folder: Path, rows_by_config: dict[str, Iterable[dict]], *,
                  max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> dict[str, dict]:
    """Write every config's rows into ``folder`` (its config subfolders are replaced).

    Returns, per config, what was written, counted on the way: ``{config: {"rows": n, "qa": n,
    "shards": [relative paths], "bytes": file bytes, "arrow_bytes": Arrow bytes, "shard_sizes":
    [{"path", "rows", "bytes", "arrow_bytes"} per shard]}}``.
    """
    with DatasetWriter(folder, max_shard_bytes=max_shard_bytes) as writer:
        for config in CONFIGS:
            for row in rows_by_config.get(config, ()):
                writer.write(config, row)
    return writer.summary()
