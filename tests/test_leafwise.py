"""A parquet file written a leaf column at a time (``dataset/leafwise.py``) has the bytes of
pyarrow's ``ParquetWriter`` writing the same row groups from whole tables, on every config's
schema, with nulls at every level of the nesting, empty lists, row groups of no rows, pages and
dictionaries that overflow, and other writer settings; and while it writes a row group, memory
holds one column, not the row group."""

from __future__ import annotations

import io
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orandcar_builder.dataset import leafwise
from orandcar_builder.dataset.features import features
from orandcar_builder.dataset.leafwise import LeafwiseWriter, leaf_only, leaf_paths, leaves, table_columns
from orandcar_builder.vocab import CONFIGS


def _value(data_type: pa.DataType, rng: random.Random, nulls: bool, big: bool):
    """A random value of ``data_type``; None at any level when ``nulls``."""
    if nulls and rng.random() < 0.15:
        return None
    if pa.types.is_struct(data_type):
        return {data_type.field(i).name: _value(data_type.field(i).type, rng, nulls, big)
                for i in range(data_type.num_fields)}
    if pa.types.is_list(data_type):
        return [_value(data_type.value_type, rng, nulls, big) for _ in range(rng.choice([0, 1, 1, 2, 3, 5]))]
    if pa.types.is_binary(data_type):
        return rng.randbytes(rng.randrange(0, 3000 if big else 200))
    if pa.types.is_string(data_type):
        if big and rng.random() < 0.5:  # distinct long texts: pages overflow, dictionaries fall back
            return "".join(rng.choice("abcdefghij \\{}$é") for _ in range(rng.randrange(100, 4000)))
        return rng.choice(["", "a", "RS", "wrong_answer", "x" * rng.randrange(0, 40), str(rng.random())])
    raise TypeError(data_type)


def _table(schema: pa.Schema, n: int, seed: int, nulls: bool = True, big: bool = False) -> pa.Table:
    rng = random.Random(seed)
    rows = [{field.name: _value(field.type, rng, nulls and field.name != "image_sha256", big) for field in schema}
            for _ in range(n)]
    return pa.Table.from_pylist(rows, schema=schema)


def _both(schema: pa.Schema, groups: list[pa.Table], **options) -> tuple[bytes, bytes]:
    options = options or {"compression": "snappy"}
    expected = io.BytesIO()
    writer = pq.ParquetWriter(expected, schema, **options)
    for group in groups:
        writer.write_table(group, row_group_size=max(1, group.num_rows))
    writer.close()
    ours = io.BytesIO()
    leafwise_writer = LeafwiseWriter(ours, schema, **options)
    for group in groups:
        leafwise_writer.write_table(group)
    leafwise_writer.close()
    return expected.getvalue(), ours.getvalue()


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("nulls", [False, True])
def test_every_config_has_the_bytes_of_parquet_writer(config, nulls):
    schema = features(config).arrow_schema
    table = _table(schema, 900, seed=len(config) + nulls, nulls=nulls)
    groups = [table.slice(0, 400), table.slice(400, 1), table.slice(401, 0), table.slice(401)]  # sliced: offsets
    expected, ours = _both(schema, groups)
    assert ours == expected
    assert pq.read_table(io.BytesIO(ours)).equals(table)


@pytest.mark.parametrize("groups", [0, 1, 14, 15, 16, 40])  # Thrift's list header: short form under 15
def test_any_number_of_row_groups(groups):
    schema = features("rejected").arrow_schema
    table = _table(schema, 3 * groups, seed=groups)
    expected, ours = _both(schema, [table.slice(3 * i, 3) for i in range(groups)])
    assert ours == expected


def test_pages_and_dictionaries_that_overflow():
    """Distinct long texts and large binaries: several data pages per chunk and dictionaries past
    their 1 MiB limit (pyarrow falls back to plain encoding mid-chunk)."""
    schema = features("RS_think").arrow_schema
    table = _table(schema, 1500, seed=3, big=True)
    expected, ours = _both(schema, [table.slice(0, 1000), table.slice(1000)])
    assert ours == expected
    group = pq.ParquetFile(io.BytesIO(ours)).metadata.row_group(0)
    chunks = [group.column(i) for i in range(group.num_columns)]
    assert any(chunk.total_uncompressed_size > 1024 * 1024 for chunk in chunks)  # more than one page
    assert any({"PLAIN", "RLE_DICTIONARY"} <= set(chunk.encodings) for chunk in chunks)  # a fallback


@pytest.mark.parametrize("options", [{"compression": "zstd"}, {"compression": "none"},
                                     {"compression": "snappy", "use_dictionary": False},
                                     {"compression": "gzip", "write_statistics": False},
                                     {"compression": "snappy", "data_page_size": 4096}])
def test_other_writer_settings(options):
    schema = features("RS_nothink").arrow_schema
    table = _table(schema, 600, seed=5)
    expected, ours = _both(schema, [table.slice(0, 250), table.slice(250)], **options)
    assert ours == expected


def test_a_schema_with_many_top_level_columns_and_plain_types():
    schema = pa.schema([pa.field(f"c{i}", pa.string() if i % 3 else pa.binary()) for i in range(20)]
                       + [pa.field("n", pa.list_(pa.list_(pa.string())))],
                       metadata={b"key": b"value"})
    table = _table(schema, 300, seed=7)
    expected, ours = _both(schema, [table, table.slice(10, 20)])
    assert ours == expected


def test_the_footer_codec_gives_back_the_bytes_it_read():
    schema = features("RS_think").arrow_schema
    expected, _ = _both(schema, [_table(schema, 200, seed=11)])
    metadata = leafwise._footer(expected)
    size = int.from_bytes(expected[-8:-4], "little")
    out = bytearray()
    leafwise._Thrift.write_struct(metadata, out)
    assert bytes(out) == expected[-8 - size:-8]


def test_a_leaf_alone_keeps_its_path_nulls_and_offsets():
    schema = features("rejected").arrow_schema
    table = _table(schema, 50, seed=13).slice(7, 30)
    column = table.column("qa").chunk(0)  # sliced: offset 7
    paths = list(leaf_paths(column.type))
    assert len(paths) == column.type.value_type.num_fields
    for index, path in enumerate(paths):
        leaf = leaf_only(column, path)
        name = column.type.value_type.field(index).name
        assert leaf.type.value_type.names == [name]
        assert leaf.to_pylist() == [None if qa is None else [None if item is None else {name: item[name]} for item in qa]
                                    for qa in column.to_pylist()]


def test_leaves_are_given_one_column_at_a_time():
    """Each top-level column is asked for only once the previous one's leaves are all written."""
    schema = features("rejected").arrow_schema
    table = _table(schema, 20, seed=17)
    asked = []

    def columns():
        for index, column in enumerate(table_columns(table)):
            asked.append(index)
            yield column

    seen = []
    for field, _array in leaves(schema, columns()):
        seen.append((field.name, len(asked)))
    assert [name for name, _ in seen] == [schema.field(i).name for i in range(len(schema))
                                         for _ in leaf_paths(schema.field(i).type)]
    assert all(asked_so_far == schema.get_field_index(name) + 1 for name, asked_so_far in seen)


def test_refuses_what_it_cannot_write():
    schema = features("rejected").arrow_schema
    with pytest.raises(ValueError, match="write_page_index"):
        LeafwiseWriter(io.BytesIO(), schema, write_page_index=True)
    with pytest.raises(ValueError, match="sorting_columns"):
        LeafwiseWriter(io.BytesIO(), schema, sorting_columns=[pq.SortingColumn(0)])
    with pytest.raises(ValueError, match="use_content_defined_chunking"):
        LeafwiseWriter(io.BytesIO(), schema, use_content_defined_chunking=True)
    for kind in (pa.dictionary(pa.int32(), pa.string()), pa.large_list(pa.string()), pa.map_(pa.string(), pa.string()),
                 pa.list_(pa.string(), 2), pa.uuid()):
        sink = io.BytesIO()
        with pytest.raises(TypeError, match="not written here"):
            LeafwiseWriter(sink, pa.schema([("ok", pa.string()), ("x", kind)]))
        assert sink.getvalue() == b""  # refused before anything is written
    writer = LeafwiseWriter(io.BytesIO(), schema)
    with pytest.raises(ValueError, match="schema differs"):
        writer.write_table(pa.table({"x": [1]}))
    column = next(leaves(schema, table_columns(_table(schema, 3, seed=1))))
    with pytest.raises(ValueError, match="has 3 rows, the row group 4"):
        writer.write_row_group(4, iter([column]))
    with pytest.raises(ValueError, match="a row group of 1 leaf columns, the schema has"):
        writer.write_row_group(3, iter([column]))  # a row group short of leaves
    with pytest.raises(ValueError, match="not a parquet file"):
        leafwise._footer(b"not parquet at all")


def test_memory_holds_one_column_of_the_row_group():
    """While a row group is written from its columns one at a time, each column is let go (by the
    leaves and by the writer) before the next one is made: pyarrow's pool then holds less than one
    column, far under the row group."""
    schema = pa.schema([pa.field(f"c{i}", pa.binary()) for i in range(8)])
    texts = [random.Random(i).randbytes(400) for i in range(20_000)]  # incompressible: scratch files as large
    column_bytes = pa.array(texts).nbytes
    pool = pa.default_memory_pool()
    start = pool.bytes_allocated()
    before_each = []

    def columns():
        for _ in range(8):
            before_each.append(pool.bytes_allocated() - start)
            yield pa.array(texts)

    sink = io.BytesIO()
    writer = LeafwiseWriter(sink, schema, compression="snappy")
    writer.write_row_group(len(texts), leaves(schema, columns()))
    writer.close()
    assert len(before_each) == 8 and max(before_each) < column_bytes / 2
    assert pq.read_table(io.BytesIO(sink.getvalue())).column("c7").to_pylist() == texts


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("nulls", [False, True])
def test_a_column_in_parts_gives_the_leaves_and_the_size_of_the_column_combined(config, nulls):
    """``column_leaves`` combines each leaf from the parts of a column (as a spilled row group
    holds it) and counts the column's Arrow size from the leaves alone: the same leaves and the
    same size as the column combined first."""
    schema = features(config).arrow_schema
    table = _table(schema, 700, seed=21 + nulls, nulls=nulls)
    cuts = [0, 1, 90, 91, 400, 700]
    for index, field in enumerate(schema):
        column = table.column(index).combine_chunks()
        parts = [pa.concat_arrays([column.slice(a, b - a)]) for a, b in zip(cuts, cuts[1:])]  # as spilled: unsliced
        sizes: list[int] = []
        got = list(leafwise.column_leaves(field, parts, sizes))
        assert sizes == [column.nbytes]
        for (leaf_field, leaf), path in zip(got, leaf_paths(field.type), strict=True):
            assert leaf.equals(leaf_only(column, path)) and leaf_field.type == leaf.type
