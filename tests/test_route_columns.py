"""The rows made a column at a time (``route.columns``, ``RoutePlan.batches_of``) are the RowPlans'
rows (``rows_of`` + ``to_row``) value for value, their chunks have the Arrow size of the same rows
as dicts, and the writer writes the same bytes from them, whatever the nulls, the read window and
the writer's chunk, row group and shard bounds."""

from __future__ import annotations

import filecmp
import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orandcar_builder.dataset import writer as writer_module
from orandcar_builder.dataset.features import features
from orandcar_builder.dataset.writer import DatasetWriter, _chunk_of_columns, _row_bytes
from orandcar_builder.pipeline.stages.write import write_rows
from orandcar_builder.records import OUTCOME_FIELDS
from orandcar_builder.route import RoutePlan
from orandcar_builder.vocab import ACCEPTED, ACCEPTED_CONFIGS, CONFIG_REJECTED, CONFIGS, FAILED, REJECTED

SCHEMA = pa.schema(list(OUTCOME_FIELDS))
ROUTE_SETS = (ACCEPTED_CONFIGS, ("RS_nothink",), (CONFIG_REJECTED,))
text = st.one_of(st.none(), st.text(max_size=6), st.sampled_from(["", "é✓", "ans", "𝑥²"]))


def _sha(k: int) -> str:
    return hashlib.sha256(str(k).encode()).hexdigest()


def _record(order: int, image: int, route_to: str, draw_values: dict) -> dict:
    return {
        "order": order, "id": f"q{order}", "family": draw_values.get("family", "scene_text"),
        "image_sha256": _sha(image), "image": draw_values.get("image", f"/pool/img/{image}.png"),
        "question": draw_values.get("question", f"What is {order}?"),
        "references": draw_values.get("references", [f"ref{order}", "alt"]),
        "options": draw_values.get("options", ["a", "b"]),
        "source": {"dataset": "d", "split": "test", "id": str(order), "origin": draw_values.get("origin", "benchmark")},
        "policy": draw_values.get("policy", "policy/1"), "actions": draw_values.get("actions", []),
        "think": draw_values.get("think"), "route": route_to,
        "accepted_text": draw_values.get("accepted_text"), "verifier": draw_values.get("verifier"),
        "wrong_vlm": draw_values.get("wrong_vlm"), "reason": draw_values.get("reason"),
    }


values = st.fixed_dictionaries({}, optional={
    "question": text, "think": text, "accepted_text": text, "verifier": text, "wrong_vlm": text, "reason": text,
    "origin": text, "family": st.text(min_size=1, max_size=4),
    "references": st.lists(st.one_of(st.none(), st.text(max_size=4)), min_size=1, max_size=3),
    "options": st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=3)),
    "actions": st.one_of(st.none(), st.lists(st.one_of(st.none(), st.sampled_from(["normalised", "é"])), max_size=3)),
    "image": st.sampled_from(["/pool/img/other.png", "/pool/ünï/x.png", "plain.png"]),
})
items = st.lists(st.tuples(st.integers(0, 9), st.sampled_from((ACCEPTED, ACCEPTED, REJECTED, FAILED)), values),
                 max_size=60)


def _decisions(path: Path, records: list[dict], row_group: int) -> Path:
    pq.write_table(pa.Table.from_pylist(records, schema=SCHEMA), path, row_group_size=max(1, row_group))
    return path


def _without_image(row: dict) -> dict:
    return {name: value for name, value in row.items() if name != "image"}


@settings(max_examples=80, deadline=None)
@given(pool=items, row_group=st.integers(1, 13), window=st.integers(1, 9), bucket_rows=st.integers(1, 30))
def test_columnar_rows_are_the_row_plans_rows(tmp_path_factory, pool, row_group, window, bucket_rows):
    records = [_record(2 * i + 1, image, route_to, drawn) for i, (image, route_to, drawn) in enumerate(pool)]
    path = _decisions(tmp_path_factory.mktemp("cols") / "decisions.parquet", records, row_group)
    with RoutePlan(path, window=window, bucket_rows=bucket_rows) as plan:
        for configs in ROUTE_SETS:
            expected = list(plan.rows_of(configs))
            batches = list(plan.batches_of({config: features(config).arrow_schema for config in configs}))
            assert [p for b in batches for p in b.paths] == [plans[0].image.path for plans in expected]
            assert [s for b in batches for s in b.shas] == [plans[0].image.sha256 for plans in expected]
            assert [n for b in batches for n in b.names] == [plans[0].image.name for plans in expected]
            for k, config in enumerate(configs):
                assert all(b.configs[k].config == config for b in batches)
                rows = [plans[k].to_row(b"") for plans in expected]
                got = [row for b in batches for row in b.configs[k].table.to_pylist()]
                assert got == [_without_image(row) for row in rows]
                assert [t + writer_module._ROW_OVERHEAD for b in batches for t in b.configs[k].text] == \
                    [_row_bytes(row) for row in rows]
                assert [q for b in batches for q in b.configs[k].qa] == [len(row["qa"]) for row in rows]


@settings(max_examples=60, deadline=None)
@given(pool=items, window=st.integers(1, 9), cuts=st.lists(st.integers(1, 7), min_size=1, max_size=12))
def test_a_chunk_of_columns_has_the_values_and_arrow_size_of_its_rows_as_dicts(tmp_path_factory, pool, window, cuts):
    # Chunks of consecutive rows, across windows: the same values as from_pylist, the same Arrow
    # size (which bounds row groups), and a validity bitmap only where from_pylist makes one.
    records = [_record(2 * i + 1, image, route_to, drawn) for i, (image, route_to, drawn) in enumerate(pool)]
    path = _decisions(tmp_path_factory.mktemp("chunks") / "decisions.parquet", records, 5)
    with RoutePlan(path, window=window) as plan:
        for configs in ROUTE_SETS:
            schema = features(configs[0]).arrow_schema
            pending, rows = [], []
            for batch, plans in _batches_with_plans(plan, configs):
                for index, plan_row in enumerate(plans):
                    data = f"img{batch.shas[index][:6]}".encode()
                    pending.append((batch.configs[0], index, data, batch.names[index]))
                    rows.append(plan_row[0].to_row(data))
            start = 0
            for size in cuts * (len(rows) // max(1, sum(cuts)) + 1):
                if start >= len(rows):
                    break
                chunk = _chunk_of_columns(pending[start:start + size], schema)
                expected = pa.Table.from_pylist(rows[start:start + size], schema=schema)
                assert chunk.equals(expected)
                assert chunk.nbytes == expected.nbytes
                assert _bitmaps(chunk) == _bitmaps(expected)
                start += size


def _batches_with_plans(plan, configs):
    batches = list(plan.batches_of({config: features(config).arrow_schema for config in configs}))
    plans = iter(list(plan.rows_of(configs)))
    for batch in batches:
        yield batch, [next(plans) for _ in range(len(batch))]


def _bitmaps(table: pa.Table) -> list:
    def walk(array: pa.Array, out: list) -> None:
        out.append(array.buffers()[0] is not None)
        kind = array.type
        if pa.types.is_struct(kind):
            for i in range(kind.num_fields):
                walk(array.field(i), out)
        elif pa.types.is_list(kind):
            walk(array.values, out)
    out: list = []
    for column in table.columns:
        for chunk in column.chunks:
            walk(chunk, out)
    return out


def _pool_with_files(folder: Path, pool: list) -> list[dict]:
    images = folder / "img"
    images.mkdir()
    records = []
    for i, (image, route_to, drawn) in enumerate(pool):
        data = bytes([image]) * (40 + 97 * image)
        file = images / f"{image}.png"
        file.write_bytes(data)
        record = _record(2 * i + 1, image, route_to, drawn)
        record.update(image=str(file), image_sha256=hashlib.sha256(data).hexdigest())
        records.append(record)
    return records


def _write_as_dicts(writer: DatasetWriter, plan: RoutePlan) -> None:
    """The write stage as it was: a RowPlan per image, a dict row per config."""
    for configs in (ACCEPTED_CONFIGS, (CONFIG_REJECTED,)):
        for plans in plan.rows_of(configs):
            data = plans[0].image.read()
            for config, row_plan in zip(configs, plans):
                writer.write(config, row_plan.to_row(data))
        for config in configs:
            writer.finish(config)


@settings(max_examples=25, deadline=None)
@given(pool=st.lists(st.tuples(st.integers(0, 9), st.sampled_from((ACCEPTED, ACCEPTED, REJECTED, FAILED)), values),
                     min_size=1, max_size=80),
       convert_rows=st.integers(1, 9), convert_bytes=st.sampled_from([300, 2000, 1 << 20]),
       row_group_bytes=st.sampled_from([3000, 20_000, 100_000_000]), shard_bytes=st.sampled_from([500, 4000, 1 << 28]),
       window=st.integers(1, 9))
def test_the_writer_writes_the_bytes_of_dict_rows_from_columns(tmp_path_factory, pool, convert_rows, convert_bytes,
                                                                row_group_bytes, shard_bytes, window):
    folder = tmp_path_factory.mktemp("write")
    path = _decisions(folder / "decisions.parquet", _pool_with_files(folder, pool), 4)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer_module, "CONVERT_ROWS", convert_rows)
        patch.setattr(writer_module, "CONVERT_BYTES", convert_bytes)
        patch.setattr(writer_module, "ROW_GROUP_MAX_BYTES", row_group_bytes)
        summaries = []
        for name, way in (("dicts", _write_as_dicts), ("columns", lambda w, p: write_rows(w, p, None))):
            with RoutePlan(path, window=window) as plan, \
                    DatasetWriter(folder / name, max_shard_bytes=shard_bytes) as writer:
                way(writer, plan)
            summaries.append(writer.summary())
    assert summaries[0] == summaries[1]
    shards = sorted(p.relative_to(folder / "dicts") for p in (folder / "dicts").rglob("*") if p.is_file())
    assert shards == sorted(p.relative_to(folder / "columns") for p in (folder / "columns").rglob("*") if p.is_file())
    assert len(shards) >= len(CONFIGS)
    for shard in shards:
        assert filecmp.cmp(folder / "dicts" / shard, folder / "columns" / shard, shallow=False), shard


def test_a_policy_that_differs_within_an_image_is_the_same_error_either_way(tmp_path):
    records = [_record(1, 3, ACCEPTED, {}), _record(3, 3, ACCEPTED, {"policy": "policy/2"})]
    path = _decisions(tmp_path / "decisions.parquet", records, 10)
    with RoutePlan(path) as plan:
        with pytest.raises(ValueError) as as_plans:
            list(plan.rows_of(ACCEPTED_CONFIGS))
        with pytest.raises(ValueError) as as_columns:
            list(plan.batches_of({config: features(config).arrow_schema for config in ACCEPTED_CONFIGS}))
    assert str(as_columns.value) == str(as_plans.value) == "item q3: cleaning policy differs within one image row"


def test_an_image_changed_since_admission_stops_the_write_naming_it(tmp_path):
    records = _pool_with_files(tmp_path, [(1, ACCEPTED, {}), (2, REJECTED, {})])
    Path(records[1]["image"]).write_bytes(b"changed")
    path = _decisions(tmp_path / "decisions.parquet", records, 10)
    with RoutePlan(path) as plan, pytest.raises(ValueError, match=r"2\.png: file changed since it was admitted"):
        with DatasetWriter(tmp_path / "out") as writer:
            write_rows(writer, plan, None)
    assert not [p for p in (tmp_path / "out" / CONFIG_REJECTED).iterdir()]  # no partial shard of the config it wrote
