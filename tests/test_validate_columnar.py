"""The column-wise evaluation of the JSON Schema flags exactly the rows jsonschema reports on.

``validate`` runs jsonschema (``_check_row``) only on the rows ``_suspect_rows`` flags, so a row it
missed would be a corruption nobody reports. These tests corrupt real rows of the sample build at
random and compare the mask with ``_check_row`` row by row: equal, not just a superset.
"""

from __future__ import annotations

import copy

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orandcar_builder.dataset import validate as validate_module
from orandcar_builder.dataset.columnar import Unsupported, compile_schema
from orandcar_builder.dataset.features import features
from orandcar_builder.dataset.validate import _check_row, _suspect_rows, json_schema, validate_folder
from orandcar_builder.vocab import CONFIGS

# Values a corruption writes into a string field: empty, whitespace, a newline at the end (Python's
# ``$`` matches before it, RE2's does not), upper-case hex, non-ASCII, names close to real ones.
FIXED_TEXTS = ["", " ", "x", "a" * 64, "A" * 64, "0" * 64 + "\n", "0" * 63, "wrong_answer", "unsure",
                     "truncated", "no_answer", "Wrong_answer", "alnum", "judge", "anls\n", "_x", "9x", "scene_text",
                     "not_a_family", "alnum ", "0" * 64 + " ", "é", "\u00e9" * 64, "ab-c", None]
TEXTS = st.one_of(st.sampled_from(FIXED_TEXTS), st.text(max_size=70))


def _sample_rows(folder, config) -> list[dict]:
    shard = sorted((folder / config).glob("train-*.parquet"))[0]
    return pq.read_table(shard).to_pylist()


def _paths(value, prefix=()):
    """Every place in a row a corruption can touch: leaves, and the lists themselves."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _paths(sub, prefix + (key,))
    elif isinstance(value, list):
        yield prefix
        for i, sub in enumerate(value):
            yield from _paths(sub, prefix + (i,))
    else:
        yield prefix


def _get(row, path):
    for key in path:
        row = row[key]
    return row


def _set(row, path, value):
    _get(row, path[:-1])[path[-1]] = value


@st.composite
def corrupted(draw, rows_by_config):
    config = draw(st.sampled_from(CONFIGS))
    rows = copy.deepcopy(rows_by_config[config])
    for _ in range(draw(st.integers(1, 4))):
        index = draw(st.integers(0, len(rows) - 1))
        row = rows[index]
        path = draw(st.sampled_from(sorted(_paths(row), key=repr)))
        target = _get(row, path)
        if target is None:
            continue  # a null an earlier corruption wrote (it may stand for a struct): leave it
        if path == ("image", "bytes"):
            choice = draw(st.sampled_from(["null", "empty", "flip", "keep"]))
            value = {"null": None, "empty": b"", "flip": (target or b"x")[:-1] + b"\0", "keep": target}[choice]
        elif isinstance(target, list):
            op = draw(st.sampled_from(["clear", "null", "append_copy", "append_null", "drop_last"]))
            value = {"clear": [], "null": None, "append_copy": target + target[:1], "append_null": target + [None],
                     "drop_last": target[:-1]}[op]
        else:
            value = draw(st.one_of(st.none(), TEXTS))
        if not path:
            continue
        if path[0] == "image" and len(path) == 1:
            continue
        _set(row, path, value)
    return config, rows


@pytest.fixture(scope="module")
def rows_by_config(built_sample):
    return {config: _sample_rows(built_sample, config) for config in CONFIGS}


def test_schemas_compile_to_checks_that_pass_a_clean_row_and_flag_a_broken_one(rows_by_config):
    for config in CONFIGS:
        row_type = pa.struct(list(features(config).arrow_schema))
        check = compile_schema(json_schema(config), row_type)
        clean = rows_by_config[config][0]
        broken = dict(clean, image_sha256="not a sha256")
        mask = check(pa.array([clean, broken], type=row_type))
        assert mask.tolist() == [False, True], config


def test_clean_rows_are_not_suspect(rows_by_config):
    for config, rows in rows_by_config.items():
        batch = pa.RecordBatch.from_pylist(rows, schema=features(config).arrow_schema)
        assert not _suspect_rows(config, batch).any()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mask_equals_jsonschema_row_by_row(rows_by_config, data):
    config, rows = data.draw(corrupted(rows_by_config))
    batch = pa.RecordBatch.from_pylist(rows, schema=features(config).arrow_schema)
    mask = _suspect_rows(config, batch)
    expected = np.array([bool(list(_check_row(config, row, "row"))) for row in batch.to_pylist()])
    assert mask.tolist() == expected.tolist()


@pytest.mark.parametrize("config", CONFIGS)
def test_every_string_field_with_every_fixed_text(rows_by_config, config):
    """Deterministic sweep: each string leaf of a row set to each of FIXED_TEXTS."""
    row = rows_by_config[config][0]
    leaves = [path for path in _paths(row) if isinstance(_get(row, path), str)]
    variants = []
    for path in leaves:
        for text in FIXED_TEXTS:
            variant = copy.deepcopy(row)
            _set(variant, path, text)
            variants.append(variant)
    batch = pa.RecordBatch.from_pylist(variants, schema=features(config).arrow_schema)
    expected = [bool(list(_check_row(config, variant, "row"))) for variant in batch.to_pylist()]
    assert _suspect_rows(config, batch).tolist() == expected
    assert any(expected) and not all(expected)


def test_sliced_batches_keep_row_numbers(rows_by_config):
    """Batches are slices of row groups: offsets must not shift the mask."""
    config = "RS_think"
    rows = copy.deepcopy(rows_by_config[config])
    rows[-1]["qa"][0]["answer"] = ""
    batch = pa.RecordBatch.from_pylist(rows, schema=features(config).arrow_schema)
    tail = batch.slice(len(rows) - 2, 2)
    assert _suspect_rows(config, tail).tolist() == [False, True]


def test_null_struct_over_filled_children(rows_by_config):
    """A struct nulled by its validity bitmap alone keeps its children's lists: struct_field then
    gives null lists over non-empty ranges, which list_flatten skips and list_parent_indices
    does not (parquet never reads back such arrays; arrays built in memory can hold them)."""
    config = "RS_think"
    rows = copy.deepcopy(rows_by_config[config][:4])
    assert len(rows) == 4
    rows[1]["clean_meta"]["sources"][0]["family"] = "poetry"  # hidden under the null clean_meta
    rows[3]["clean_meta"]["sources"][-1]["origin"] = ""
    schema = features(config).arrow_schema
    batch = pa.RecordBatch.from_pylist(rows, schema=schema)
    meta = batch.column("clean_meta")
    nulled = pa.StructArray.from_arrays([meta.field(i) for i in range(meta.type.num_fields)], fields=list(meta.type),
                                        mask=pa.array([False, True, False, False]))
    batch = pa.RecordBatch.from_arrays([batch.column(i) for i in range(3)] + [nulled], schema=schema)
    expected = [bool(list(_check_row(config, row, "row"))) for row in batch.to_pylist()]
    assert expected == [False, True, False, True]
    assert _suspect_rows(config, batch).tolist() == expected

def test_unsupported_keyword_falls_back_to_every_row(monkeypatch, rows_by_config):
    with pytest.raises(Unsupported):
        compile_schema({"type": "string", "maxLength": 3}, pa.string())
    with pytest.raises(Unsupported):
        compile_schema({"type": "integer"}, pa.int64())
    with pytest.raises(Unsupported):
        compile_schema({"type": "string"}, pa.int64())
    monkeypatch.setattr(validate_module, "_columnar", lambda config: None)
    batch = pa.RecordBatch.from_pylist(rows_by_config["rejected"], schema=features("rejected").arrow_schema)
    assert _suspect_rows("rejected", batch).all()


def test_exhaustive_and_columnar_report_the_same(sample_copy):
    shard = sorted((sample_copy / "RS_think").glob("train-*.parquet"))[0]
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["qa"][0]["verifier"] = "Alnum"
    rows[-1]["image_sha256"] = rows[0]["image_sha256"]
    rows[1]["clean_meta"]["sources"][0]["family"] = "poetry"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    fast = validate_folder(sample_copy)
    assert fast == validate_folder(sample_copy, exhaustive=True)
    assert len(fast) >= 4, fast  # pattern, sha mismatch, duplicate image, unknown family


def test_cli_exhaustive_flag(sample_copy):
    from click.testing import CliRunner

    from orandcar_builder.cli import main

    runner = CliRunner()
    assert runner.invoke(main, ["validate", "--exhaustive", str(sample_copy)]).exit_code == 0
    shard = sorted((sample_copy / "rejected").glob("train-*.parquet"))[0]
    table = pq.read_table(shard)
    rows = table.to_pylist()
    rows[0]["qa"][0]["reason"] = "looked_wrong"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    fast = runner.invoke(main, ["validate", str(sample_copy)])
    slow = runner.invoke(main, ["validate", "--exhaustive", str(sample_copy)])
    assert fast.exit_code == slow.exit_code == 1
    assert fast.output == slow.output and "row 0 field qa.0.reason" in fast.output


def test_duplicate_image_found_after_the_seen_map_spills_to_disk(monkeypatch, sample_copy):
    """The map of images seen keeps few keys in memory; a repeat far back is still found."""
    from orandcar_builder import spill

    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", 2)
    monkeypatch.setattr(spill, "REPEATS_BUCKET_KEYS", 2)
    shard = sorted((sample_copy / "RS_think").glob("train-*.parquet"))[0]
    table = pq.read_table(shard)
    rows = table.to_pylist()
    assert len(rows) > 5
    rows[-1]["image_sha256"] = rows[0]["image_sha256"]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    last = len(rows) - 1
    assert (f"RS_think/{shard.name} row {last} field image_sha256: image already has a row "
            f"(RS_think/{shard.name} row 0)") in validate_folder(sample_copy)


def test_repeated_images_are_named_in_row_order_after_the_rows_other_problems(monkeypatch, sample_copy):
    """A well-formed sha256 repeated is named once the config's rows are read (spill.Repeats), in
    row order, with its first row; a malformed one (not 64 characters) repeated is named with its
    row's other problems, as it comes; null ones are never repeats."""
    from orandcar_builder import spill

    monkeypatch.setattr(spill, "REPEATS_BUCKET_KEYS", 3)
    shard = sorted((sample_copy / "RS_think").glob("train-*.parquet"))[0]
    table = pq.read_table(shard)
    rows = table.to_pylist()
    assert len(rows) > 6
    rows[4]["image_sha256"] = rows[1]["image_sha256"]
    rows[5]["image_sha256"] = rows[1]["image_sha256"]
    rows[3]["image_sha256"] = rows[2]["image_sha256"] = "abc"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    label = f"RS_think/{shard.name}"
    problems = [p for p in validate_folder(sample_copy) if p.startswith("RS_think/")]
    repeats = [p for p in problems if "image already has a row" in p]
    assert repeats == [f"{label} row 3 field image_sha256: image already has a row ({label} row 2)",
                       f"{label} row 4 field image_sha256: image already has a row ({label} row 1)",
                       f"{label} row 5 field image_sha256: image already has a row ({label} row 1)"]
    assert problems.index(repeats[0]) < problems.index(repeats[1]) == len(problems) - 2  # the numpy ones come last
    assert any(p.startswith(f"{label} row 2 field image_sha256") and "already" not in p for p in problems)
