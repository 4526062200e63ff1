"""A shard whose row group decodes to more than parquetio.MAX_ROW_GROUP_BYTES is refused from its
footer, before its rows are read: validate reports it as a problem, diff and recheck end with one
error naming the shard. Variants: the large value in other columns, plainly or dictionary-encoded
(one value named by many rows), under other codecs; our own writer's row groups stay within it."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orandcar_builder import parquetio
from orandcar_builder.cli import main
from orandcar_builder.dataset import writer as writer_module
from orandcar_builder.dataset.validate import validate_folder
from orandcar_builder.dataset.writer import write_dataset
from orandcar_builder.parquetio import ShardTooLargeError, check_row_groups

from .conftest import REPO

BOUND = 4 << 20  # the bound these tests set, so that their own values stay small
BIG = 6 << 20  # one value past it


def shard_of(folder, config="RS_nothink"):
    return sorted((folder / config).glob("*.parquet"))[0]


def set_leaf(table: pa.Table, path: tuple[str, ...], value) -> pa.Table:
    """``table`` with the leaf ``path`` (top column, then struct fields; lists walked through) set
    to ``value`` in every row."""
    top = path[0]
    column = table.column(top).combine_chunks()

    def replace(array: pa.Array, rest: tuple[str, ...]) -> pa.Array:
        if not rest:
            return pa.array([value] * len(array), array.type)
        if pa.types.is_list(array.type):
            return pa.ListArray.from_arrays(array.offsets, replace(array.flatten(), rest), type=array.type)
        fields = [array.type.field(i) for i in range(array.type.num_fields)]
        children = [replace(array.field(f.name), rest[1:]) if f.name == rest[0] else array.field(f.name)
                    for f in fields]
        return pa.StructArray.from_arrays(children, fields=fields)

    return table.set_column(table.schema.get_field_index(top), table.schema.field(top), replace(column, path[1:]))


VARIANTS = [
    (("qa", "answer"), "x" * BIG, {}),
    (("qa", "question"), "q" * BIG, {"compression": "zstd"}),
    (("clean_meta", "policy"), "p" * BIG, {"compression": "gzip", "use_dictionary": False}),
    (("image", "path"), "i" * BIG, {"use_dictionary": False, "compression": "zstd"}),
    (("image", "bytes"), b"\0" * BIG, {"use_dictionary": False, "compression": "brotli"}),
    (("image_sha256",), "s" * BIG, {}),
    # dictionary-encoded: a value of a third of the bound, stored once, named by every row
    (("qa", "answer"), "d" * (BOUND // 3), {}),
    (("clean_meta", "sources", "dataset"), "d" * (BOUND // 3), {"compression": "zstd"}),
]


def hostile(folder, path, value, options, config="RS_nothink", rows=4):
    """Rewrite ``config``'s shard of ``folder`` with ``value`` in the leaf ``path`` of ``rows`` rows."""
    shard = shard_of(folder, config)
    table = pq.read_table(shard)
    table = pa.concat_tables([table] * (rows // table.num_rows + 1)).slice(0, rows)
    table = set_leaf(table, path, value)
    pq.write_table(table, shard, **options)  # the schema's metadata (datasets features) is kept
    return shard


@pytest.fixture
def bound(monkeypatch):
    monkeypatch.setattr(parquetio, "MAX_ROW_GROUP_BYTES", BOUND)


def test_the_sample_shards_are_within_the_bound(built_sample):
    shards = list(built_sample.glob("*/*.parquet"))
    assert len(shards) == 3  # one shard per config: the loop below checks something
    for shard in shards:
        check_row_groups(shard)


@pytest.mark.parametrize("path,value,options", VARIANTS)
def test_validate_reports_the_shard_and_reads_none_of_its_rows(sample_copy, bound, path, value, options):
    shard = hostile(sample_copy, path, value, options)
    assert shard.stat().st_size < BOUND / 4  # compressed, it is small: only the footer tells
    problems = validate_folder(sample_copy)
    mine = [p for p in problems if p.startswith(f"RS_nothink/{shard.name}")]
    assert len(mine) == 1 and "decodes to" in mine[0] and f"{BOUND:,}" in mine[0], problems
    assert not any(p.startswith(f"RS_nothink/{shard.name} row") for p in problems)


@pytest.mark.parametrize("path,value,options", VARIANTS[:1] + VARIANTS[-1:])
def test_diff_and_recheck_end_with_one_error_naming_the_shard(sample_copy, built_sample, bound, path, value,
                                                               options):
    shard = hostile(sample_copy, path, value, options)
    runner = CliRunner()
    for args in (["diff", str(built_sample), str(sample_copy)], ["recheck", str(sample_copy)]):
        res = runner.invoke(main, args)
        assert res.exit_code == 2, res.output
        errors = [line for line in res.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and shard.name in errors[0] and "decodes to" in errors[0], res.output


def test_a_column_diff_does_not_read_is_not_bounded_for_it(sample_copy, built_sample, bound):
    hostile(sample_copy, ("image", "path"), "i" * BIG, {"use_dictionary": False})
    res = CliRunner().invoke(main, ["diff", str(built_sample), str(sample_copy)])
    assert res.exit_code == 1 and "error:" not in res.output, res.output  # 1: the versions differ


def test_repeated_small_values_within_the_bound_pass(tmp_path):
    table = pa.table({"s": pa.array(["w" * 1000] * 2000)})  # 2 MB decoded from a 1 kB dictionary
    pq.write_table(table, tmp_path / "ok.parquet")
    check_row_groups(tmp_path / "ok.parquet", limit=BOUND)
    with pytest.raises(ShardTooLargeError, match="dictionary-encoded"):
        check_row_groups(tmp_path / "ok.parquet", limit=1 << 20)


def test_our_writer_closes_a_row_group_at_its_byte_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_module, "ROW_GROUP_MAX_BYTES", 50_000)
    rows = []
    for i in range(30):
        data = hashlib.sha256(str(i).encode()).digest() * 400  # 12.8 kB each
        rows.append({"image": {"bytes": data, "path": f"{i}.png"}, "image_sha256": hashlib.sha256(data).hexdigest(),
                     "qa": [{"question": "q", "answer": "a", "wrong_vlm": "w", "reason": "wrong_answer"}],
                     "clean_meta": {"policy": "p", "sources": [{"dataset": "d", "split": "s", "id": str(i),
                                                                "origin": "benchmark", "family": "scene_text",
                                                                "references": ["a"], "options": []}],
                                    "actions": []}})
    write_dataset(tmp_path / "out", {"rejected": rows})
    meta = pq.ParquetFile(shard_of(tmp_path / "out", "rejected")).metadata
    assert meta.num_rows == 30 and meta.num_row_groups == 10  # a fourth row would pass 50 kB
    parquet = pq.ParquetFile(shard_of(tmp_path / "out", "rejected"))
    assert all(parquet.read_row_group(g).nbytes <= 50_000 for g in range(meta.num_row_groups))


AMPLIFIED = r"""
import sys
import pyarrow as pa, pyarrow.parquet as pq
from pathlib import Path
folder = Path(sys.argv[1])
shard = sorted((folder / "RS_nothink").glob("*.parquet"))[0]
table = pq.read_table(shard)
rows = 700  # each names one 1 MiB value: 700 MiB decoded, past the bound of 512 MiB
table = pa.concat_tables([table] * (rows // table.num_rows + 1)).slice(0, rows)
sha = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["f" * (1 << 20)]))
table = table.set_column(table.schema.get_field_index("image_sha256"), pa.field("image_sha256", sha.type), sha)
metadata = pq.read_schema(shard).metadata
writer = pq.ParquetWriter(shard, table.schema, store_schema=False)  # read back as plain strings
writer.write_table(table)
writer.add_key_value_metadata(metadata)  # the datasets features, as the writer stores them
writer.close()
"""
# The peak resident size of this process (VmHWM: ru_maxrss of a child counts its parent's at fork).
VALIDATE = r"""
import re, sys
from pathlib import Path
from orandcar_builder.dataset.validate import validate_folder
print(repr(validate_folder(sys.argv[1])))
print("peak_mib", int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) // 1024)
"""


def test_validate_memory_stays_bounded_on_a_dictionary_bomb(sample_copy):
    """At the real bound, in a process of its own: a 700 MiB column in a shard of a few kB."""
    for script in (AMPLIFIED, VALIDATE):  # the shard is made in a process of its own, which then ends
        res = subprocess.run([sys.executable, "-c", script, str(sample_copy)], capture_output=True, text=True,
                             timeout=300, cwd=REPO)
        assert res.returncode == 0, res.stderr
    assert shard_of(sample_copy).stat().st_size < 1 << 20
    out = res.stdout.splitlines()
    assert "decodes to" in out[0] and "its rows are not read" in out[0]
    assert int(out[1].split()[1]) < 400, res.stdout + res.stderr  # validating 700 MiB of rows takes gigabytes


def test_the_card_command_refuses_an_oversized_shard_and_keeps_the_card(sample_copy, sample_build, bound, tmp_path):
    import json

    result, _ = sample_build
    (tmp_path / "report.json").write_text(json.dumps(result.report), encoding="utf-8")
    shard = hostile(sample_copy, ("qa", "answer"), "x" * BIG, {"compression": "zstd"})
    before = (sample_copy / "README.md").read_bytes()
    res = CliRunner().invoke(main, ["card", str(sample_copy), "--work", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert shard.name in res.output and "decodes to" in res.output
    assert (sample_copy / "README.md").read_bytes() == before


def test_the_review_page_skips_an_oversized_shard(sample_copy, bound):
    from orandcar_builder.review.thumbnails import _from_shards

    shas = set(pq.read_table(shard_of(sample_copy), columns=["image_sha256"]).column(0).to_pylist())
    assert _from_shards(sample_copy, shas).keys() == shas  # found in RS_nothink (and RS_think)
    hostile(sample_copy, ("image", "bytes"), b"\0" * BIG, {"use_dictionary": False, "compression": "zstd"},
            config="RS_think", rows=2)
    hostile(sample_copy, ("image", "bytes"), b"\0" * BIG, {"use_dictionary": False, "compression": "zstd"}, rows=2)
    found = _from_shards(sample_copy, shas)
    assert found.keys() <= shas  # the other shards still serve; no error
    assert all(image != b"\0" * BIG for image in found.values())  # nothing read from the skipped shards


CODECS = ["snappy", "zstd", "gzip", "brotli", "lz4", "none"]


@pytest.mark.parametrize("codec", CODECS)
def test_text_that_never_repeats_is_bounded_by_its_dictionary_page_alone(tmp_path, monkeypatch, codec):
    """Many distinct values (what our shards' questions, ids and sha256 are): the footer's worst
    case exceeds the bound, the longest dictionary entry times the values does not, so the column is
    not read (a read builds a dictionary of the whole row group: memory in its size)."""
    values = [f"{i:08d}" + "v" * (i % 50) for i in range(20_000)]
    pq.write_table(pa.table({"s": pa.array(values), "n": pa.array(range(20_000))}), tmp_path / "u.parquet",
                   compression=codec)
    chunk = pq.ParquetFile(tmp_path / "u.parquet").metadata.row_group(0).column(0)
    assert chunk.num_values * chunk.total_uncompressed_size > BOUND  # the footer alone cannot rule it out
    assert parquetio._longest_entry(tmp_path / "u.parquet", chunk) == 8 + 49

    def no_read(*args):
        raise AssertionError("the column was read")

    monkeypatch.setattr(parquetio, "_measured", no_read)
    check_row_groups(tmp_path / "u.parquet", limit=BOUND)
    with open(tmp_path / "u.parquet", "rb") as handle:  # a file object, as diff hands over
        check_row_groups(handle, pq.ParquetFile(handle, pre_buffer=False), limit=BOUND)


@pytest.mark.parametrize("codec", CODECS)
def test_one_long_entry_among_short_ones_is_counted_exactly(tmp_path, codec):
    """The longest entry is the dictionary page's, wherever it stands in it: one value of a third of
    the bound named by many rows among short distinct ones goes past the entry bound; it is then
    counted exactly and refused."""
    values = [f"{i}" for i in range(3000)] + ["L" * (BOUND // 3)] * 6
    pq.write_table(pa.table({"s": pa.array(values)}), tmp_path / "l.parquet", compression=codec,
                   dictionary_pagesize_limit=64 << 20)
    chunk = pq.ParquetFile(tmp_path / "l.parquet").metadata.row_group(0).column(0)
    assert parquetio._longest_entry(tmp_path / "l.parquet", chunk) == BOUND // 3
    with pytest.raises(ShardTooLargeError, match="dictionary-encoded"):
        check_row_groups(tmp_path / "l.parquet", limit=BOUND)


def test_a_dictionary_page_header_that_does_not_parse_is_counted_exactly(tmp_path, monkeypatch):
    values = [f"{i:08d}" for i in range(20_000)]
    pq.write_table(pa.table({"s": pa.array(values)}), tmp_path / "h.parquet")
    chunk = pq.ParquetFile(tmp_path / "h.parquet").metadata.row_group(0).column(0)
    data = bytearray((tmp_path / "h.parquet").read_bytes())
    data[chunk.dictionary_page_offset:chunk.dictionary_page_offset + 8] = b"\xff" * 8
    (tmp_path / "h.parquet").write_bytes(bytes(data))
    assert parquetio._longest_entry(tmp_path / "h.parquet", chunk) is None
    measured = []
    monkeypatch.setattr(parquetio, "_measured", lambda *args: measured.append(args) or 0)
    check_row_groups(tmp_path / "h.parquet", limit=BOUND)
    assert measured  # no bound from the page: the column is counted


def test_a_dictionary_page_is_walked_once_by_its_content(tmp_path, monkeypatch):
    # The card, validate and the review ask about the same shards: a page already walked is known
    # by its bytes' digest; a page whose bytes changed (same file, same size) is walked again.
    values = [f"{i:08d}" for i in range(20_000)]
    path = tmp_path / "w.parquet"
    pq.write_table(pa.table({"s": pa.array(values)}), path, compression="none")
    walked = []
    walk = parquetio._longest_plain
    monkeypatch.setattr(parquetio, "_longest_plain", lambda data, count: walked.append(count) or walk(data, count))
    for _ in range(3):
        check_row_groups(path, limit=BOUND)
    assert walked == [20_000]
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    at = data.index(b"00000007", chunk.dictionary_page_offset)  # the 8th entry: a 4-byte length, then its bytes
    data[at - 4:at + 8] = (4).to_bytes(4, "little") + b"L" * 8  # its length now 4: the walk ends past the page
    path.write_bytes(bytes(data))
    assert parquetio._longest_entry(path, chunk) is None and walked == [20_000, 20_000]
    measured = []
    monkeypatch.setattr(parquetio, "_measured", lambda *args: measured.append(args) or 0)
    check_row_groups(path, limit=BOUND)
    assert measured and walked == [20_000, 20_000]  # no bound from the page now: counted exactly (page known)


def test_validate_and_the_card_report_a_refused_shard_alike_in_either_order(sample_copy, bound):
    # One process asks about the same shard from the card and from validate: each gives the
    # refusal with the same message, whichever asked first, and again when asked again.
    from orandcar_builder.card.errors import CardError
    from orandcar_builder.card.examples import read_row

    shard = hostile(sample_copy, ("qa", "answer"), "d" * (BOUND // 3), {})  # refused from its dictionary page

    def card_says():
        with pytest.raises(CardError) as caught:
            read_row([shard], 0)
        return str(caught.value).removeprefix(f"{shard}: ")

    def validate_says():
        mine = [p for p in validate_folder(sample_copy) if p.startswith(f"RS_nothink/{shard.name}")]
        assert len(mine) == 1, mine
        return mine[0].removeprefix(f"RS_nothink/{shard.name}: ").removesuffix("; its rows are not read")

    first = card_says()
    assert "dictionary-encoded" in first and f"{BOUND:,}" in first
    assert validate_says() == first and card_says() == first and validate_says() == first
