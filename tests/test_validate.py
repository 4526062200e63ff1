"""`orandcar validate` must catch each planted corruption, naming config, shard, row and field."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orandcar_builder.cli import main
from orandcar_builder.dataset.features import features
from orandcar_builder.dataset.validate import json_schema, validate_folder
from orandcar_builder.vocab import CONFIGS


def _shard(folder: Path, config: str) -> Path:
    return sorted((folder / config).glob("train-*.parquet"))[0]


def _rewrite_rows(folder: Path, config: str, change) -> Path:
    """Apply ``change(rows)`` to the first shard's rows, keeping the schema and its metadata."""
    shard = _shard(folder, config)
    table = pq.read_table(shard)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), shard)
    return shard


def _set_qa(index, field, value):
    def change(rows):
        rows[0]["qa"][index][field] = value
    return change


def corrupt_sha(folder):
    _rewrite_rows(folder, "rejected", lambda rows: rows[0].update(image_sha256="0" * 64))


def corrupt_image_bytes(folder):
    def change(rows):
        data = bytearray(rows[0]["image"]["bytes"])
        data[-10] ^= 0xFF
        rows[0]["image"]["bytes"] = bytes(data)
    _rewrite_rows(folder, "RS_think", change)


def misalign_sources(folder):
    _rewrite_rows(folder, "RS_nothink", lambda rows: rows[0]["clean_meta"]["sources"].append(
        dict(rows[0]["clean_meta"]["sources"][0])))


def bad_reason(folder):
    _rewrite_rows(folder, "rejected", _set_qa(0, "reason", "looked_wrong"))


def empty_question(folder):
    _rewrite_rows(folder, "RS_think", _set_qa(0, "question", ""))


def unknown_verifier(folder):
    _rewrite_rows(folder, "RS_nothink", _set_qa(0, "verifier", "vibes"))


def duplicate_image_row(folder):
    _rewrite_rows(folder, "rejected", lambda rows: rows.append(rows[0]))


def strip_features_metadata(folder):
    shard = _shard(folder, "RS_think")
    table = pq.read_table(shard)
    pq.write_table(table.replace_schema_metadata({}), shard)


def drop_column(folder):
    shard = _shard(folder, "rejected")
    pq.write_table(pq.read_table(shard).drop_columns(["image_sha256"]), shard)


def rename_shard(folder):
    shard = _shard(folder, "RS_think")
    shard.rename(shard.with_name("train-00001-of-00001.parquet"))


def remove_config(folder):
    for p in (folder / "rejected").iterdir():
        p.unlink()
    (folder / "rejected").rmdir()


def stray_file(folder):
    (folder / "RS_think" / "notes.txt").write_text("x")


def edit_readme_configs(folder):
    readme = folder / "README.md"
    readme.write_text(readme.read_text().replace("path: rejected/train-*", "path: rejected/*.parquet"))


def remove_readme(folder):
    (folder / "README.md").unlink()


def not_parquet(folder):
    _shard(folder, "RS_nothink").write_bytes(b"PAR1 garbage")


CORRUPTIONS = {
    corrupt_sha: "rejected/train-00000-of-00001.parquet row 0 field image_sha256",
    corrupt_image_bytes: "RS_think/train-00000-of-00001.parquet row 0 field image_sha256",
    misalign_sources: "RS_nothink/train-00000-of-00001.parquet row 0 field clean_meta.sources",
    bad_reason: "rejected/train-00000-of-00001.parquet row 0 field qa.0.reason",
    empty_question: "RS_think/train-00000-of-00001.parquet row 0 field qa.0.question",
    unknown_verifier: "RS_nothink/train-00000-of-00001.parquet row 0 field qa.0.verifier",
    strip_features_metadata: "RS_think/train-00000-of-00001.parquet: no datasets features metadata",
    drop_column: "rejected/train-00000-of-00001.parquet: arrow schema differs",
    rename_shard: "RS_think/train-00001-of-00001.parquet: shard index 1, expected 0",
    remove_config: "rejected: folder missing",
    stray_file: "RS_think/notes.txt: unexpected file",
    edit_readme_configs: "README.md: configs block differs",
    remove_readme: "README.md: missing",
    not_parquet: "RS_nothink/train-00000-of-00001.parquet: not a readable parquet file",
}


def test_clean_sample_validates(built_sample):
    assert validate_folder(built_sample) == []


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS), ids=lambda f: f.__name__)
def test_each_corruption_is_caught(sample_copy, corrupt):
    corrupt(sample_copy)
    problems = validate_folder(sample_copy)
    assert any(p.startswith(CORRUPTIONS[corrupt]) for p in problems), problems


def test_duplicate_image_row_is_caught(sample_copy):
    duplicate_image_row(sample_copy)
    problems = validate_folder(sample_copy)
    assert any("image already has a row" in p for p in problems), problems


def test_cli_exit_codes(sample_copy):
    runner = CliRunner()
    assert runner.invoke(main, ["validate", str(sample_copy)]).exit_code == 0
    corrupt_sha(sample_copy)
    res = runner.invoke(main, ["validate", str(sample_copy)])
    assert res.exit_code == 1
    assert "rejected/train-00000-of-00001.parquet row 0 field image_sha256" in res.output


@pytest.mark.parametrize("config", CONFIGS)
def test_json_schema_and_features_describe_the_same_rows(config):
    """One source of truth: the JSON Schema's fields are exactly the features' fields."""
    schema = json_schema(config)
    feats = features(config)
    assert set(schema["properties"]) == set(feats) == set(schema["required"])
    qa_schema = schema["properties"]["qa"]["items"]
    assert set(qa_schema["properties"]) == set(feats["qa"].feature) == set(qa_schema["required"])
    meta = schema["properties"]["clean_meta"]
    assert set(meta["properties"]) == set(feats["clean_meta"])
    assert set(meta["properties"]["sources"]["items"]["properties"]) == set(feats["clean_meta"]["sources"].feature)
    assert set(schema["properties"]["image"]["properties"]) == {"bytes", "path"}


def test_a_row_group_is_read_a_column_and_a_batch_at_a_time(tmp_path, monkeypatch):
    """validate holds one column of a row group (for its Arrow size) or one batch of rows, never
    the whole row group (up to the writer's 100 MB), and still counts the row group's Arrow size
    as a reader of the whole row group gets it (the card's num_bytes)."""
    import hashlib

    import orandcar_builder.dataset.validate as validate
    from orandcar_builder.dataset.writer import write_dataset
    from orandcar_builder.families import DEFAULT_FAMILIES

    rows = []
    for i in range(3000):
        data = hashlib.sha256(str(i).encode()).digest()
        rows.append({"image": {"bytes": data, "path": f"{i}.png"}, "image_sha256": hashlib.sha256(data).hexdigest(),
                     "qa": [{"question": f"question {i} " * 4, "answer": "b", "wrong_vlm": "c", "reason": "wrong_answer"}],
                     "clean_meta": {"policy": "p", "actions": [], "sources": [
                         {"dataset": "d", "split": "test", "id": str(i), "origin": "benchmark", "family": "scene_text",
                          "references": ["b"], "options": []}]}})
    write_dataset(tmp_path, {"rejected": rows})
    shard = _shard(tmp_path, "rejected")
    whole = pq.ParquetFile(shard).read_row_group(0)
    assert pq.ParquetFile(shard).num_row_groups == 1
    largest_column = max(whole.column(i).nbytes for i in range(whole.num_columns))
    assert largest_column < whole.nbytes * 0.75

    held = []
    read_row_group, iter_batches = pq.ParquetFile.read_row_group, pq.ParquetFile.iter_batches

    def recorded_read(self, *args, **kwargs):
        table = read_row_group(self, *args, **kwargs)
        held.append(table.nbytes)
        return table

    def recorded_batches(self, *args, **kwargs):
        for batch in iter_batches(self, *args, **kwargs):
            held.append(batch.nbytes)
            yield batch

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", recorded_read)
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", recorded_batches)
    monkeypatch.setattr(validate, "BATCH_BYTES", 64 * 1024)
    measured = {}
    with validate.ImagesSeen() as seen:
        seen.config_rows("rejected")
        problems = list(validate._check_rows("rejected", [shard], seen, False, measured, DEFAULT_FAMILIES))
        problems += seen.config_done()
    assert problems == []
    assert measured[shard] == (3000, whole.nbytes)
    assert held and max(held) <= largest_column


@pytest.mark.parametrize("with_nulls", [False, True])
def test_a_row_groups_size_is_summed_from_its_batches_and_read_whole_only_where_a_bitmap_is(
        tmp_path, monkeypatch, with_nulls):
    """The Arrow size validate measures batch by batch is the whole row groups' size (the card's
    num_bytes, ``info.arrow_bytes``), across several row groups and batches; a row group is read
    again a column at a time only where a batch holds a validity bitmap (a null somewhere)."""
    import orandcar_builder.dataset.validate as validate
    from orandcar_builder.dataset import writer as writer_module
    from orandcar_builder.dataset.info import arrow_bytes
    from orandcar_builder.dataset.writer import write_dataset
    from orandcar_builder.families import DEFAULT_FAMILIES

    from .test_writer import _rows, _rows_with_null_values

    monkeypatch.setattr(writer_module, "ROW_GROUP_MAX_BYTES", 120_000)
    rows = _rows_with_null_values(900, 4) if with_nulls else _rows(900, 4)
    write_dataset(tmp_path, {"rejected": rows})
    shard = _shard(tmp_path, "rejected")
    assert pq.ParquetFile(shard).num_row_groups > 3
    whole_reads = []
    row_group_nbytes = validate.row_group_nbytes
    monkeypatch.setattr(validate, "row_group_nbytes",
                        lambda parquet, group: whole_reads.append(group) or row_group_nbytes(parquet, group))
    monkeypatch.setattr(validate, "BATCH_BYTES", 16 * 1024)
    measured = {}
    with validate.ImagesSeen() as seen:
        seen.config_rows("rejected")
        list(validate._check_rows("rejected", [shard], seen, False, measured, DEFAULT_FAMILIES))  # rows of another schema's rules
    assert measured[shard] == (900, arrow_bytes([shard]))
    assert bool(whole_reads) == with_nulls


def test_a_card_that_differs_from_the_batch_sums_is_judged_on_whole_row_groups(sample_copy, monkeypatch):
    """Where the card's sizes differ from the ones summed batch by batch, the shards are measured
    whole before anything is said: a right card stays right, a wrong one is reported with the
    whole row groups' size."""
    import orandcar_builder.dataset.validate as validate
    from orandcar_builder.dataset.info import arrow_bytes

    batches = validate._batches

    def off_by_one(parquet, shard, measured):
        yield from batches(parquet, shard, measured)
        rows, size = measured[shard]
        measured[shard] = (rows, size + 1)

    monkeypatch.setattr(validate, "_batches", off_by_one)
    assert validate_folder(sample_copy) == []
    readme = sample_copy / "README.md"
    exact = arrow_bytes(sorted((sample_copy / "rejected").glob("*.parquet")))
    text = readme.read_text()
    assert f"num_bytes: {exact}\n" in text
    readme.write_text(text.replace(f"num_bytes: {exact}\n", f"num_bytes: {exact + 7}\n", 1))
    problems = validate_folder(sample_copy)
    assert any(f"num_bytes {exact + 7}, the shards hold {exact} bytes of rows" in p for p in problems), problems
