"""The Hub-layout writer: shards bounded by bytes, written a row group at a time, with the same
bytes as writing each shard's rows in one ``pq.write_table`` call."""

from __future__ import annotations

import hashlib
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orandcar_builder.dataset.features import CONFIGS, features
from orandcar_builder.dataset.writer import ROW_GROUP_SIZE, ConfigWriter, _row_bytes, write_dataset


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


@pytest.mark.parametrize("n, max_bytes", [(0, 10**9), (1, 10**9), (ROW_GROUP_SIZE, 10**9),
                                          (2 * ROW_GROUP_SIZE + 7, 10**9), (300, 20_000), (90, 5_000)])
def test_shards_match_one_write_table_per_shard(tmp_path, n, max_bytes):
    summary = write_dataset(tmp_path / "out", {"rejected": _rows(n)}, max_shard_bytes=max_bytes)
    shards = _reference_shards(list(_rows(n)), max_bytes)
    schema = features("rejected").arrow_schema
    written = summary["rejected"]["shards"]
    assert len(written) == len(shards)
    for index, (rel, rows) in enumerate(zip(written, shards)):
        assert rel == f"rejected/train-{index:05d}-of-{len(shards):05d}.parquet"
        expected = tmp_path / f"expected-{index}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), expected, row_group_size=ROW_GROUP_SIZE,
                       compression="snappy")
        assert (tmp_path / "out" / rel).read_bytes() == expected.read_bytes()
    assert summary["rejected"]["rows"] == n
    assert summary["rejected"]["qa"] == sum(len(r["qa"]) for r in _rows(n))
    for config in CONFIGS:  # configs without rows still get one (empty) shard
        assert len(summary[config]["shards"]) == 1 or config == "rejected"


def test_memory_holds_one_row_group(tmp_path):
    with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
        for row in _rows(450):
            writer.write(row)
            assert len(writer._group) < ROW_GROUP_SIZE  # written out as soon as a row group fills
        writer.finalize()
    assert pq.ParquetFile(tmp_path / "rejected" / "train-00000-of-00001.parquet").metadata.num_row_groups == 5


def test_failed_write_leaves_no_partial_shards(tmp_path):
    def rows():
        yield from _rows(150)
        raise RuntimeError("image vanished")

    with pytest.raises(RuntimeError):
        with ConfigWriter(tmp_path, "rejected", 10**9) as writer:
            for row in rows():
                writer.write(row)
    assert list((tmp_path / "rejected").iterdir()) == []
