"""A parquet file written one leaf column at a time, with the bytes of ``pq.ParquetWriter``.

pyarrow writes a row group from one whole table (``ParquetWriter.write_table``): every column of
the row group is in memory at once. Arrow C++ can write a row group a column chunk at a time, but
pyarrow does not expose it. Here each leaf column (a path to one primitive value: ``image.bytes``,
``qa.list.element.question``) is written alone, as the only column of a scratch parquet file in
memory, by pyarrow's own writer with the shard's settings; its column chunk (the dictionary page
and the data pages) is copied into the shard, and the shard's footer is the footer pyarrow writes
for the schema with no rows, given the copied chunks' metadata with their offsets moved to where
the chunks now lie. Parquet encodes, compresses and describes each column chunk on its own (its
pages carry no file offsets; its statistics are its values'), so the file is byte for byte the one
``ParquetWriter.write_table`` writes from the same rows (tests/test_leafwise.py compares them on
every config's rows, nulls, empty lists, several row groups and row groups of no rows), as long as
each row group's columns are contiguous arrays, which is how ``write_row_group`` takes them (a
table of many chunks per column, given to ``ParquetWriter`` as it is, can cut its pages elsewhere).

A leaf alone is the column's array with every other branch pruned (``leaf_only``): the same lists'
offsets and the same nulls on its path, so the same repetition and definition levels. Memory holds
one leaf's values and the path's offsets, not the row group.

The footer is Thrift's compact protocol (parquet.thrift's ``FileMetaData``). ``_Thrift`` decodes a
struct to ``[field id, type, value]`` lists and encodes it back to the same bytes; only the fields
named below are read or changed, the rest are copied as they are.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"

# Thrift compact protocol's types.
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

# parquet.thrift's field ids used here.
_FILE_NUM_ROWS, _FILE_ROW_GROUPS = 3, 4  # FileMetaData
_RG_COLUMNS, _RG_BYTES, _RG_OFFSET, _RG_COMPRESSED, _RG_ORDINAL = 1, 2, 5, 6, 7  # RowGroup
_CC_FILE_OFFSET, _CC_META = 2, 3  # ColumnChunk
_CC_INDEX_FIELDS = (4, 6)  # ColumnChunk: offset index and column index offsets (the page index)
_META_UNCOMPRESSED, _META_COMPRESSED = 6, 7  # ColumnMetaData: total sizes
_META_DATA_PAGE, _META_DICTIONARY_PAGE = 9, 11  # ColumnMetaData: where the chunk's pages start
_META_OFFSETS = (9, 10, 11, 14)  # ColumnMetaData: data, index, dictionary page; bloom filter


class _Thrift:
    """Thrift's compact protocol, the subset parquet's footer uses (no maps), both ways."""

    def __init__(self, data: bytes):
        self.data = memoryview(data).cast("B")
        self.pos = 0

    def _byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def _varint(self) -> int:
        shift = result = 0
        while True:
            byte = self._byte()
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    def _zigzag(self) -> int:
        value = self._varint()
        return (value >> 1) ^ -(value & 1)

    def _value(self, kind: int):
        if kind in (_TRUE, _FALSE):  # a bool inside a list: one byte of its own
            return self._byte() == _TRUE
        if kind == _BYTE:
            return self._byte()
        if kind in (_I16, _I32, _I64):
            return self._zigzag()
        if kind == _DOUBLE:
            value = struct.unpack_from("<d", self.data, self.pos)[0]
            self.pos += 8
            return value
        if kind == _BINARY:
            size = self._varint()
            value = bytes(self.data[self.pos:self.pos + size])
            self.pos += size
            return value
        if kind in (_LIST, _SET):
            header = self._byte()
            size, element = header >> 4, header & 0x0F
            if size == 15:
                size = self._varint()
            return (element, [self._value(element) for _ in range(size)])
        if kind == _STRUCT:
            return self.read_struct()
        raise ValueError(f"parquet footer: Thrift type {kind} is not read here")

    def read_struct(self) -> list:
        fields, last = [], 0
        while True:
            header = self._byte()
            if header == _STOP:
                return fields
            delta, kind = header >> 4, header & 0x0F
            field_id = last + delta if delta else self._zigzag()
            value = kind == _TRUE if kind in (_TRUE, _FALSE) else self._value(kind)
            fields.append([field_id, kind, value])
            last = field_id

    @staticmethod
    def _write_varint(value: int, out: bytearray) -> None:
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)

    @classmethod
    def _write_value(cls, kind: int, value, out: bytearray) -> None:
        if kind in (_TRUE, _FALSE):
            out.append(_TRUE if value else _FALSE)
        elif kind == _BYTE:
            out.append(value)
        elif kind in (_I16, _I32, _I64):
            cls._write_varint((value << 1) ^ (value >> 63), out)
        elif kind == _DOUBLE:
            out += struct.pack("<d", value)
        elif kind == _BINARY:
            cls._write_varint(len(value), out)
            out += value
        elif kind in (_LIST, _SET):
            element, items = value
            if len(items) < 15:
                out.append(len(items) << 4 | element)
            else:
                out.append(0xF0 | element)
                cls._write_varint(len(items), out)
            for item in items:
                cls._write_value(element, item, out)
        elif kind == _STRUCT:
            cls.write_struct(value, out)
        else:
            raise ValueError(f"parquet footer: Thrift type {kind} is not written here")

    @classmethod
    def write_struct(cls, fields: list, out: bytearray) -> None:
        last = 0
        for field_id, kind, value in fields:
            boolean = kind in (_TRUE, _FALSE)
            if boolean:  # a bool field's value is its header's type
                kind = _TRUE if value else _FALSE
            if 0 < field_id - last <= 15:
                out.append((field_id - last) << 4 | kind)
            else:
                out.append(kind)
                cls._write_varint((field_id << 1) ^ (field_id >> 63), out)
            if not boolean:
                cls._write_value(kind, value, out)
            last = field_id
        out.append(_STOP)


def _field(fields: list, field_id: int):
    """The ``[id, type, value]`` entry of ``field_id`` in a decoded struct, or None."""
    for entry in fields:
        if entry[0] == field_id:
            return entry
    return None


def _value(fields: list, field_id: int):
    """The value of ``field_id`` in a decoded struct, or 0 where it is absent (parquet's offsets and
    sizes: 0 is "none")."""
    entry = _field(fields, field_id)
    return 0 if entry is None else entry[2]


def _footer(data) -> list:
    """The decoded ``FileMetaData`` of a whole parquet file in ``data``."""
    view = memoryview(data).cast("B")  # a pyarrow Buffer exports signed bytes
    if bytes(view[-4:]) != MAGIC:
        raise ValueError("not a parquet file: no PAR1 at its end")
    size = struct.unpack("<I", view[-8:-4])[0]
    reader = _Thrift(view[-8 - size:-8])
    metadata = reader.read_struct()
    if reader.pos != size:
        raise ValueError("parquet footer: trailing bytes after FileMetaData")
    return metadata


def leaf_paths(data_type: pa.DataType, prefix: tuple = ()) -> Iterator[tuple]:
    """The child indexes leading to each primitive leaf of ``data_type``, in parquet's column
    order (a struct's fields in order; a list's values)."""
    if pa.types.is_struct(data_type):
        for index in range(data_type.num_fields):
            yield from leaf_paths(data_type.field(index).type, prefix + (index,))
    elif pa.types.is_list(data_type):
        yield from leaf_paths(data_type.value_type, prefix + (0,))
    elif (pa.types.is_nested(data_type) or pa.types.is_dictionary(data_type)
          or isinstance(data_type, pa.BaseExtensionType)):
        raise TypeError(f"leaf columns of {data_type} are not written here")
    else:
        yield prefix


def leaf_only(array: pa.Array, path: tuple) -> pa.Array:
    """``array`` with every branch but the one ``path`` leads to pruned: the same lists' offsets
    and nulls, the one leaf's values (shared, not copied)."""
    if not path:
        return array
    if array.offset:  # a slice: pyarrow builds lists with nulls from offsets that start at 0 only
        array = pa.concat_arrays([array])
    data_type = array.type
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(data_type):
        field = data_type.field(path[0])
        child = leaf_only(array.field(path[0]), path[1:])  # .field() applies the struct's offset
        return pa.StructArray.from_arrays([child], fields=[field.with_type(child.type)], mask=mask)
    if pa.types.is_list(data_type):
        field = data_type.value_field
        child = leaf_only(array.values, path[1:])  # the offsets point into the whole values
        return pa.ListArray.from_arrays(array.offsets, child, type=pa.list_(field.with_type(child.type)),
                                        mask=mask)
    raise TypeError(f"no leaf path {path} in {data_type}")


def leaves(schema: pa.Schema, columns: Iterable[pa.Array]) -> Iterator[tuple[pa.Field, pa.Array]]:
    """Each leaf column alone, in the file's column order, from the top-level ``columns`` of
    ``schema`` given one contiguous array at a time: a field named as its column, and the leaf's
    array. A column is let go once its leaves are taken, before the next is asked for."""
    columns = iter(columns)
    for field in schema:
        column = next(columns)
        for path in leaf_paths(field.type):
            array = leaf_only(column, path)
            yield field.with_type(array.type), array
            del array
        del column


def column_leaves(field: pa.Field, chunks: list[pa.Array], sizes: list[int]) -> Iterator[tuple[pa.Field, pa.Array]]:
    """The leaves of one column given as ``chunks`` (consecutive parts of it), each combined from
    the chunks' pruned copies as it is asked for: memory holds one leaf combined, never the column.
    Once the last leaf is taken, the Arrow size the column would have as one contiguous array (what
    a reader gets back) is appended to ``sizes``, counted from the leaves (``_NodeSizes``)."""
    nodes = _NodeSizes()
    for path in leaf_paths(field.type):
        parts = [leaf_only(chunk, path) for chunk in chunks]
        array = pa.concat_arrays(parts)
        del parts
        nodes.add(path, array)
        yield field.with_type(array.type), array
        del array
    sizes.append(nodes.total())


class _NodeSizes:
    """The Arrow size of a contiguous column from its leaves alone. A leaf pruned from the column
    (``leaf_only``) carries every node on its path with that node's own buffers (validity, list
    offsets) as the column has them, and its values; summed over the leaves, a node under k leaves
    is counted k times. So the column's size is the leaves' sizes less k - 1 times each node's own
    bytes, which a leaf gives as its node's size less its child's."""

    def __init__(self):
        self.leaves = 0
        self.own: dict[tuple, int] = {}
        self.count: dict[tuple, int] = {}

    def add(self, path: tuple, leaf: pa.Array) -> None:
        self.leaves += leaf.nbytes
        node = leaf
        for depth in range(len(path)):
            child = node.field(0) if pa.types.is_struct(node.type) else node.values
            prefix = path[:depth]
            self.own[prefix] = node.nbytes - child.nbytes
            self.count[prefix] = self.count.get(prefix, 0) + 1
            node = child

    def total(self) -> int:
        return self.leaves - sum((self.count[prefix] - 1) * own for prefix, own in self.own.items())


def table_columns(table: pa.Table) -> Iterator[pa.Array]:
    """``table``'s columns, each combined into one array as it is asked for and then dropped from
    the table: memory holds the table's chunks and one column combined (a column of one chunk that
    is no slice is that chunk, not a copy)."""
    while table.num_columns:
        chunks = table.column(0).chunks
        column = chunks[0] if len(chunks) == 1 and chunks[0].offset == 0 else table.column(0).combine_chunks()
        del chunks
        table = table.remove_column(0)
        yield column
        del column


class LeafwiseWriter:
    """Writes a parquet file row group by row group, each row group a leaf column at a time
    (``write_row_group``), or from a whole table (``write_table``, as ``pq.ParquetWriter`` does).
    ``options`` are ``pq.ParquetWriter``'s (the scratch files are written with them); options that
    write anything between the row groups and the footer (the page index, bloom filters), name
    columns by their index in the file (sorting columns) or encrypt it are refused."""

    def __init__(self, sink: BinaryIO, schema: pa.Schema, **options):
        for option in ("write_page_index", "encryption_properties", "bloom_filter_options", "sorting_columns",
                       "use_content_defined_chunking"):  # its chunking state runs across row groups
            if options.get(option):
                raise ValueError(f"LeafwiseWriter cannot write parquet files with {option}")
        self._leaves = sum(len(list(leaf_paths(field.type))) for field in schema)  # refuses what it cannot write
        self.sink = sink
        self.schema = schema
        self.options = options
        empty = pa.BufferOutputStream()
        pq.ParquetWriter(empty, schema, **options).close()  # the footer of the schema and no rows
        self._metadata = _footer(empty.getvalue())
        self._row_groups: list = []
        self._rows = 0
        self._position = 0
        self._write(MAGIC)

    def _write(self, data) -> None:
        self.sink.write(data)
        self._position += len(data)

    def write_table(self, table: pa.Table) -> None:
        """``table`` as one row group (its chunks are combined a column at a time)."""
        if not table.schema.equals(self.schema):
            raise ValueError(f"table schema differs from the file's: {table.schema} != {self.schema}")
        self.write_row_group(table.num_rows, leaves(self.schema, table_columns(table)))

    def write_row_group(self, num_rows: int, columns: Iterable[tuple[pa.Field, pa.Array]]) -> None:
        """One row group of ``num_rows`` rows from its leaf columns, given in the file's column
        order as ``leaves`` gives them; each is written and let go before the next is taken."""
        chunks: list = []
        group = None
        first_shift = 0
        for field, array in columns:
            if len(array) != num_rows:
                raise ValueError(f"leaf column {field.name} has {len(array)} rows, the row group {num_rows}")
            scratch = pa.BufferOutputStream()
            schema = pa.schema([field])
            writer = pq.ParquetWriter(scratch, schema, **self.options)
            writer.write_table(pa.Table.from_arrays([array], schema=schema), row_group_size=max(1, num_rows))
            writer.close()
            del array, writer  # the closed writer still holds its sink
            data = scratch.getvalue()
            del scratch
            row_groups = _field(_footer(data), _FILE_ROW_GROUPS)[2][1]
            columns_written = _field(row_groups[0], _RG_COLUMNS)[2][1] if len(row_groups) == 1 else []
            if len(columns_written) != 1:
                raise ValueError(f"LeafwiseWriter: leaf column {field.name} ({field.type}) gave "
                                 f"{len(row_groups)} row groups of {len(columns_written)} column chunks, not one")
            row_group, column_chunk = row_groups[0], columns_written[0]
            if any(_field(column_chunk, index) for index in _CC_INDEX_FIELDS):
                raise ValueError("LeafwiseWriter: the scratch file has a page index")
            meta = _value(column_chunk, _CC_META)
            start = _value(meta, _META_DICTIONARY_PAGE) or _value(meta, _META_DATA_PAGE)
            size = _value(meta, _META_COMPRESSED)
            shift = self._position - start
            self._write(memoryview(data)[start:start + size])
            del data  # the scratch file goes before the next leaf is made
            # Offsets into the scratch file become offsets into this one; 0 means "none".
            for entry in [_field(meta, index) for index in _META_OFFSETS] + [_field(column_chunk, _CC_FILE_OFFSET)]:
                if entry is not None and entry[2]:
                    entry[2] += shift
            chunks.append(column_chunk)
            if group is None:
                group, first_shift = row_group, shift
        if len(chunks) != self._leaves:
            raise ValueError(f"LeafwiseWriter: a row group of {len(chunks)} leaf columns, the schema has {self._leaves}")
        for entry in group:
            if entry[0] == _RG_COLUMNS:
                entry[2] = (_STRUCT, chunks)
            elif entry[0] == _RG_BYTES:
                entry[2] = sum(_value(_value(chunk, _CC_META), _META_UNCOMPRESSED) for chunk in chunks)
            elif entry[0] == _RG_COMPRESSED:
                entry[2] = sum(_value(_value(chunk, _CC_META), _META_COMPRESSED) for chunk in chunks)
            elif entry[0] == _RG_OFFSET and entry[2]:
                entry[2] += first_shift
            elif entry[0] == _RG_ORDINAL:
                entry[2] = len(self._row_groups)
        self._row_groups.append(group)
        self._rows += num_rows

    def close(self) -> None:
        """Write the footer (the sink stays open: its owner closes it)."""
        for entry in self._metadata:
            if entry[0] == _FILE_NUM_ROWS:
                entry[2] = self._rows
            elif entry[0] == _FILE_ROW_GROUPS:
                entry[2] = (_STRUCT, self._row_groups)
        footer = bytearray()
        _Thrift.write_struct(self._metadata, footer)
        self._write(footer)
        self._write(struct.pack("<I", len(footer)))
        self._write(MAGIC)
