"""The Hub-layout writer: shards bounded by bytes, written a row group at a time, row groups
bounded by their Arrow bytes (no fixed row count), a shard that fits in one row group with the
same bytes as writing its rows in one ``pq.write_table`` call."""

from __future__ import annotations

import hashlib
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orandcar_builder.dataset import writer as writer_module
from orandcar_builder.dataset.features import features
from orandcar_builder.dataset.writer import CONVERT_ROWS, ConfigWriter, _row_bytes, write_dataset
from orandcar_builder.vocab import CONFIGS


def _rows(n: int, seed: int = 0):
    rng = random.Random(seed)
    for i in range(n):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(50, 1500)))
        qa = [{"question": f"q{i}-{j}", "answer": "a" * rng.randrange(4), "wrong_vlm": "x", "reason": "wrong_answer"}
              for j in range(rng.randrange(1, 4))]
        sources = [{"dataset": "d", "split": "test", "id": str(i), "origin": "benchmark", "family": "scene_text",
                    "references": ["a"], "options": []} for _ in qa]
        yield {"image": {"bytes": data, "path": f"{i}.png"}, "image_sha256": hashlib.sha256(data).hexdigest(),
               "qa": qa, "clean_meta": {"policy": "p", "sources": sources, "actions": []}}


def _reference_shards(rows, max_bytes):
    """The shards as the byte rule cuts them: a shard closes after the row that reaches the bound."""
    shards, current, size = [], [], 0
    for row in rows:
        current.append(row)
        size += _row_bytes(row)
        if size >= max_bytes:
            shards.append(current)
            current, size = [], 0
    if current or not shards:
        shards.append(current)
    return shards


@pytest.mark.parametrize("n, max_bytes", [(0, 10**9), (1, 10**9), (CONVERT_ROWS, 10**9),
                                          (2 * CONVERT_ROWS + 7, 10**9), (300, 20_000), (90, 5_000)])
def test_shards_match_one_write_table_per_shard(tmp_path, n, max_bytes):
    summary = write_dataset(tmp_path / "out", {"rejected": _rows(n)}, max_shard_bytes=max_bytes)
    shards = _reference_shards(list(_rows(n)), max_bytes)
    schema = features("rejected").arrow_schema
    written = summary["rejected"]["shards"]
    assert len(written) == len(shards)
    for index, (rel, rows) in enumerate(zip(written, shards)):
        assert rel == f"rejected/train-{index:05d}-of-{len(shards):05d}.parquet"
        expected = tmp_path / f"expected-{index}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), expected, row_group_size=max(1, len(rows)),
                       compression="snappy")
        assert (tmp_path / "out" / rel).read_bytes() == expected.read_bytes()
        assert pq.ParquetFile(expected).metadata.num_row_groups == 1
    assert summary["rejected"]["rows"] == n
    assert summary["rejected"]["qa"] == sum(len(r["qa"]) for r in _rows(n))
    for config in CONFIGS:  # configs without rows still get one (empty) shard
        assert len(summary[config]["shards"]) == 1 or config == "rejected"


def test_python_objects_are_held_for_a_few_rows_only(tmp_path):
    with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
        for row in _rows(450):
            writer.write(row)
            assert len(writer._pending) < CONVERT_ROWS  # turned into Arrow as soon as a chunk fills
        writer.finalize()
    # small rows: no fixed row count, the whole shard is one row group
    assert pq.ParquetFile(tmp_path / "rejected" / "train-00000-of-00001.parquet").metadata.num_row_groups == 1


def test_large_images_are_converted_a_few_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "CONVERT_BYTES", 3000)
    with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
        for row in _rows(200):
            writer.write(row)
            assert writer._pending_bytes < 3000 or len(writer._pending) == 1
        writer.finalize()


@pytest.mark.parametrize("bound, convert_rows", [(50_000, 100), (50_000, 3), (20_000, 1), (200_000, 7)])
def test_row_groups_are_bounded_by_their_arrow_bytes(tmp_path, monkeypatch, bound, convert_rows):
    """Every row group a reader gets back holds at most the bound in Arrow bytes, and only as few
    row groups are cut as the bound needs (two neighbours would not fit together); the rows read
    back are the rows written, in order."""
    monkeypatch.setattr(writer_module, "ROW_GROUP_MAX_BYTES", bound)
    monkeypatch.setattr(writer_module, "CONVERT_ROWS", convert_rows)
    rows = list(_rows(600, seed=3))
    summary = write_dataset(tmp_path / "out", {"rejected": iter(rows)})
    parquet = pq.ParquetFile(tmp_path / "out" / summary["rejected"]["shards"][0])
    sizes = [parquet.read_row_group(g).nbytes for g in range(parquet.num_row_groups)]
    assert parquet.num_row_groups > 1 and max(sizes) <= bound
    assert all(a + b > bound for a, b in zip(sizes, sizes[1:]))
    assert parquet.read().to_pylist() == pa.Table.from_pylist(rows, schema=parquet.schema_arrow).to_pylist()


def test_a_row_larger_than_the_bound_has_a_row_group_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "ROW_GROUP_MAX_BYTES", 20_000)
    monkeypatch.setattr(writer_module, "CONVERT_BYTES", 10_000)
    rows = list(_rows(40, seed=4))
    big = dict(rows[20], image={"bytes": b"\x89" * 50_000, "path": "big.png"})
    rows[20] = big
    summary = write_dataset(tmp_path / "out", {"rejected": iter(rows)})
    parquet = pq.ParquetFile(tmp_path / "out" / summary["rejected"]["shards"][0])
    groups = [parquet.read_row_group(g) for g in range(parquet.num_row_groups)]
    alone = [g for g in groups if g.nbytes > 20_000]
    assert len(alone) == 1 and alone[0].num_rows == 1
    assert alone[0].column("image").to_pylist()[0]["path"] == "big.png"
    assert sum(g.num_rows for g in groups) == 40


def test_failed_write_leaves_no_partial_shards(tmp_path):
    def rows():
        yield from _rows(150)
        raise RuntimeError("image vanished")

    with pytest.raises(RuntimeError):
        with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
            for row in rows():
                writer.write(row)
    assert list((tmp_path / "rejected").iterdir()) == []


def _rows_with_null_values(n: int, seed: int = 1):
    """Rows whose text and list values are sometimes null or empty (every struct is present)."""
    rng = random.Random(seed)
    for row in _rows(n, seed):
        for qa in row["qa"]:
            for key in qa:
                qa[key] = rng.choice([qa[key], None, ""])
        source = row["clean_meta"]["sources"][0]
        source["references"] = rng.choice([None, [], ["a", None], ["b" * rng.randrange(200)]])
        row["clean_meta"]["actions"] = rng.choice([None, [], ["dropped a duplicate QA item"]])
        row["image"]["path"] = rng.choice([row["image"]["path"], None])
        yield row


@pytest.mark.parametrize("rows, max_bytes", [(lambda: _rows(0), 10**9), (lambda: _rows(7), 10**9),
                                             (lambda: _rows(2 * CONVERT_ROWS + 7), 10**9),
                                             (lambda: _rows(300), 20_000),
                                             (lambda: _rows_with_null_values(250), 30_000),
                                             (lambda: _rows_with_null_values(1500, 2), 10**9)])
def test_the_summary_counts_what_a_reader_gets_back(tmp_path, rows, max_bytes):
    """Per shard, the rows, file bytes and Arrow bytes the writer counted while writing are what
    reading the shard back gives (the figures the card's dataset_info states and validate checks)."""
    summary = write_dataset(tmp_path / "out", {"rejected": rows()}, max_shard_bytes=max_bytes)
    for config in CONFIGS:
        written = summary[config]
        assert [s["path"] for s in written["shard_sizes"]] == written["shards"]
        for shard in written["shard_sizes"]:
            parquet = pq.ParquetFile(tmp_path / "out" / shard["path"])
            assert shard["rows"] == parquet.metadata.num_rows
            assert shard["bytes"] == (tmp_path / "out" / shard["path"]).stat().st_size
            assert shard["arrow_bytes"] == sum(parquet.read_row_group(g).nbytes for g in range(parquet.num_row_groups))
        assert written["rows"] == sum(s["rows"] for s in written["shard_sizes"])
        assert written["bytes"] == sum(s["bytes"] for s in written["shard_sizes"])
        assert written["arrow_bytes"] == sum(s["arrow_bytes"] for s in written["shard_sizes"])
    assert len(summary["rejected"]["shards"]) > 1 or max_bytes == 10**9


def test_configs_written_interleaved_have_the_bytes_of_one_after_the_other(tmp_path):
    # The write stage writes RS_think and RS_nothink rows as it makes them, all three writers
    # open: each config's shards must be those of writing the configs one after the other.
    from orandcar_builder.dataset.writer import DatasetWriter

    rows = {config: list(_rows(n, seed)) for config, n, seed in zip(CONFIGS, (250, 170, 90), (1, 2, 3))}
    for config in ("RS_think", "RS_nothink"):  # rows of their own config's schema
        for row in rows[config]:
            row["qa"] = [{"question": qa["question"], "answer": qa["answer"], "org_answer": "o", "verifier": "alnum",
                          **({"think": "t" * len(qa["answer"])} if config == "RS_think" else {})} for qa in row["qa"]]
    one_after_other = write_dataset(tmp_path / "a", rows, max_shard_bytes=60_000)
    with DatasetWriter(tmp_path / "b", max_shard_bytes=60_000) as writer:
        order = [(config, i) for config in CONFIGS for i in range(len(rows[config]))]
        random.Random(7).shuffle(order)  # any interleaving that keeps each config's own order
        for config in CONFIGS:
            mine = [entry for entry in order if entry[0] == config]
            for slot, entry in zip(sorted(order.index(e) for e in mine), sorted(mine, key=lambda e: e[1])):
                order[slot] = entry
        for config, i in order:
            writer.write(config, rows[config][i])
    assert writer.summary() == one_after_other
    assert sum(len(s["shards"]) for s in one_after_other.values()) > 3  # several shards per config
    for config in CONFIGS:
        for rel in one_after_other[config]["shards"]:
            assert (tmp_path / "b" / rel).read_bytes() == (tmp_path / "a" / rel).read_bytes()


def test_a_failing_row_leaves_no_shard_of_any_config(tmp_path):
    from orandcar_builder.dataset.writer import DatasetWriter

    rows = list(_rows(5))
    with pytest.raises(pa.ArrowException):  # the bad row's chunk cannot become Arrow
        with DatasetWriter(tmp_path / "out", max_shard_bytes=10**9) as writer:
            for row in rows:
                writer.write("rejected", row)
            writer.write("RS_nothink", {**rows[0], "qa": [{"question": 3}]})
            writer.write("RS_nothink", rows[1])
            for config in CONFIGS:
                writer.writers[config]._convert()
    assert not [p for p in (tmp_path / "out").rglob("*") if p.is_file()]


def test_a_finished_config_is_on_disk_before_the_others_end_and_takes_no_more_rows(tmp_path):
    # The write stage finishes RS_think before it writes rejected, so that one open row group is
    # held at a time: its shards are final then, with the bytes of write_dataset's.
    from orandcar_builder.dataset.writer import DatasetWriter

    rows = list(_rows(120, 5))
    reference = write_dataset(tmp_path / "a", {"rejected": rows}, max_shard_bytes=10**9)
    with DatasetWriter(tmp_path / "b", max_shard_bytes=10**9, configs=("rejected",)) as writer:
        for row in rows:
            writer.write("rejected", row)
        writer.finish("rejected")
        assert writer.writers["rejected"]._group == [] and writer.writers["rejected"]._shard is None
        for rel in reference["rejected"]["shards"]:
            assert (tmp_path / "b" / rel).read_bytes() == (tmp_path / "a" / rel).read_bytes()
        writer.finish("rejected")  # once is enough: a second call writes nothing again
    assert writer.summary() == {"rejected": reference["rejected"]}


# -- a row group spilled to disk while it fills (``_GroupSpill``) -----------------------------------


def _write_with_spill(folder, rows, monkeypatch, spill_bytes, **bounds):
    monkeypatch.setattr(writer_module, "SPILL_BYTES", spill_bytes)
    for name, value in bounds.items():
        monkeypatch.setattr(writer_module, name, value)
    return write_dataset(folder, {"rejected": rows()}, max_shard_bytes=10**9)


@pytest.mark.parametrize("rows", [lambda: _rows(700, 8), lambda: _rows_with_null_values(600, 9)])
@pytest.mark.parametrize("spill_bytes", [1, 5_000, 60_000])
@pytest.mark.parametrize("bounds", [{}, {"ROW_GROUP_MAX_BYTES": 90_000}, {"ROW_GROUP_MAX_BYTES": 40_000, "CONVERT_ROWS": 7}])
def test_a_spilled_row_group_has_the_bytes_of_one_held_in_memory(tmp_path, monkeypatch, rows, spill_bytes, bounds):
    """Spilling changes where a row group waits, not what is written: the same shards, byte for
    byte, and the same counted sizes as a row group held in memory until it is written."""
    held = _write_with_spill(tmp_path / "held", rows, monkeypatch, 10**12, **bounds)
    spilled = _write_with_spill(tmp_path / "spilled", rows, monkeypatch, spill_bytes, **bounds)
    assert spilled == held
    for rel in held["rejected"]["shards"]:
        assert (tmp_path / "spilled" / rel).read_bytes() == (tmp_path / "held" / rel).read_bytes()
    if bounds:
        assert pq.ParquetFile(tmp_path / "held" / held["rejected"]["shards"][0]).num_row_groups > 1


def test_memory_holds_the_spill_batch_not_the_row_group(tmp_path, monkeypatch):
    """While a row group fills, only the chunks since the last spill are held as Arrow; the rest
    waits in files no one else sees (the config's folder lists only the partial shard)."""
    monkeypatch.setattr(writer_module, "SPILL_BYTES", 20_000)
    rows = list(_rows(800, 10))
    with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
        for row in rows:
            writer.write(row)
            held = sum(chunk.nbytes for chunk in writer._group)
            assert held < 20_000
            assert writer._group_arrow_bytes <= held or writer._spill is not None
        assert writer._group_arrow_bytes > 10 * 20_000  # the row group itself is far larger
        assert [p.name for p in (tmp_path / "rejected").iterdir()] == [".train-00000.parquet.partial"]
        writer.finalize()
    assert writer._spill is None
    table = pq.read_table(tmp_path / "rejected" / "train-00000-of-00001.parquet")
    assert table.to_pylist() == pa.Table.from_pylist(rows, schema=table.schema).to_pylist()


def test_a_failure_with_a_spilled_row_group_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "SPILL_BYTES", 5_000)

    def rows():
        yield from _rows(400)
        raise RuntimeError("image vanished")

    spill_files = []
    with pytest.raises(RuntimeError):
        with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
            for row in rows():
                writer.write(row)
                if writer._spill is not None and not spill_files:
                    spill_files.extend(writer._spill.files)
    assert spill_files and all(handle.closed for handle in spill_files)
    assert writer._spill is None
    assert list((tmp_path / "rejected").iterdir()) == []


def test_a_failure_while_a_spilled_row_group_is_written_closes_its_files_at_once(tmp_path, monkeypatch):
    """The spill's files are closed when writing the row group fails, not later when the error
    (whose traceback holds the writer's frames) is let go."""
    from orandcar_builder.dataset.leafwise import LeafwiseWriter

    monkeypatch.setattr(writer_module, "SPILL_BYTES", 5_000)

    def failing(self, rows, columns):
        next(iter(columns))  # the first leaf is read, then the disk fills
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LeafwiseWriter, "write_row_group", failing)
    spill_files = []
    with pytest.raises(OSError) as caught:
        with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
            for row in _rows(400):
                writer.write(row)
                if writer._spill is not None and not spill_files:
                    spill_files.extend(writer._spill.files)
            writer.finalize()
    assert caught.value.filename == str(tmp_path / "rejected" / ".train-00000.parquet.partial")
    assert spill_files and all(handle.closed for handle in spill_files)
    assert list((tmp_path / "rejected").iterdir()) == []


def test_a_spilled_column_is_mapped_and_its_pages_dropped_leaf_by_leaf(tmp_path, monkeypatch):
    """A spilled row group's column files are mapped into memory when written, the pages read for
    a leaf are dropped once it is written, and each mapping is closed once its column's leaves are
    written (not left for the garbage collector)."""
    import mmap as mmap_module

    from orandcar_builder.dataset.leafwise import leaf_paths

    closed = []

    class Mapping(mmap_module.mmap):
        def close(self):
            super().close()  # a BufferError here would mean an array still refers to the pages
            closed.append(self)

    released = []

    class MmapModule:
        mmap, ACCESS_READ, MADV_DONTNEED = Mapping, mmap_module.ACCESS_READ, mmap_module.MADV_DONTNEED

    original = Mapping.madvise

    def madvise(self, option, *args):
        released.append(option)
        return original(self, option, *args)

    Mapping.madvise = madvise

    monkeypatch.setattr(writer_module, "mmap", MmapModule)
    summary = _write_with_spill(tmp_path / "spilled", lambda: _rows_with_null_values(600, 9), monkeypatch, 5_000)
    columns = len(features("rejected").arrow_schema)
    assert len(closed) == columns * len(summary["rejected"]["shards"]) and all(m.closed for m in closed)
    leaves = sum(len(list(leaf_paths(field.type))) for field in features("rejected").arrow_schema)
    assert released == [mmap_module.MADV_DONTNEED] * leaves  # each leaf's pages dropped once it is written
