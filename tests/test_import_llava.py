"""The llava importer: conversation records (JSON array or JSONL) to pool lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from orandcar_builder.errors import OrandCarError, UnknownNameError
from orandcar_builder.images import ImagePolicy
from orandcar_builder.pool import import_source, read_pool
from orandcar_builder.pool.llava import conversation_pairs, iter_json_array, strip_image_marker
from orandcar_builder.records import Dropped, PoolItem

OUTSIDE_OK = ImagePolicy(allow_outside_paths=True)  # imported pools name images where they are


def make_png(path: Path, color: str = "red") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), color).save(path, "PNG")
    return path


def conv(*turns: tuple[str, str]) -> list[dict]:
    return [{"from": role, "value": text} for role, text in turns]


def write_source(path: Path, records: list, layout: str) -> Path:
    if layout == "json":
        path.write_text(json.dumps(records, indent=2), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture
def images(tmp_path: Path) -> Path:
    make_png(tmp_path / "src" / "img" / "a.png", "red")
    make_png(tmp_path / "src" / "img" / "b.png", "blue")
    return tmp_path / "src"


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_each_pair_becomes_one_item_on_the_same_image(images: Path, tmp_path: Path, layout: str):
    records = [{
        "id": "r1", "image": "img/a.png", "source": "textvqa",
        "conversations": conv(("human", "<image>\nWhat does the sign say?"), ("gpt", "STOP"),
                              ("human", "What colour is it?"), ("gpt", "red")),
    }]
    source = write_source(images / f"data.{layout}", records, layout)
    out = tmp_path / "pool" / "pool.jsonl"
    report = import_source("llava", source, out, family="scene_text", origin="InfinityMM")
    assert (report.read, report.written, report.problems_total) == (1, 2, 0)
    lines = read_lines(out)
    assert [l["id"] for l in lines] == ["r1#0", "r1#1"]
    assert [l["question"] for l in lines] == ["What does the sign say?", "What colour is it?"]
    assert [l["answer"] for l in lines] == ["STOP", "red"]
    assert lines[0]["image"] == lines[1]["image"] == "../src/img/a.png"
    assert lines[0]["source"] == {"dataset": "textvqa", "split": "train", "id": "r1", "origin": "InfinityMM",
                                  "image": "../src/img/a.png"}
    items = [r for r in read_pool(out, images=OUTSIDE_OK) if isinstance(r, PoolItem)]
    assert len(items) == 2 and items[0].image.sha256 == items[1].image.sha256


@pytest.mark.parametrize("layout", ["json", "jsonl"])
@pytest.mark.parametrize(
    "turns, reasons, written",
    [
        (conv(("gpt", "orphan"), ("human", "Q?"), ("gpt", "A")), ["turn_out_of_order"], 1),
        (conv(("human", "Q1?"), ("human", "Q2?"), ("gpt", "A2")), ["unanswered_turn"], 1),
        (conv(("human", "Q?"), ("gpt", "A"), ("human", "dangling?")), ["unanswered_turn"], 1),
        (conv(("human", "Q?"), ("bot", "A")), ["unknown_role", "unanswered_turn"], 0),
        (conv(("human", "<image>"), ("gpt", "A")), ["empty_question"], 0),
        (conv(("human", "Q?"), ("gpt", "  ")), ["empty_answer"], 0),
        ([{"from": "human"}, {"from": "gpt", "value": "A"}], ["bad_turn", "turn_out_of_order"], 0),
    ],
)
def test_turn_problems_are_reported_with_where(images, tmp_path, layout, turns, reasons, written):
    source = write_source(images / f"data.{layout}", [{"id": "r", "image": "img/a.png", "conversations": turns}], layout)
    report = import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text")
    assert report.written == written
    assert sorted(p.reason for p in report.problems) == sorted(reasons)
    assert all(p.where.startswith(f"data.{layout}:") and " turn " in p.where for p in report.problems)
    assert all(p.id and p.id.startswith("r") for p in report.problems)


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_record_problems_do_not_stop_the_import(images, tmp_path, layout):
    good = {"id": "ok", "image": "img/b.png", "conversations": conv(("human", "Q?"), ("gpt", "A"))}
    records = [
        {"id": "gone", "image": "img/missing.png", "conversations": conv(("human", "Q?"), ("gpt", "A"))},
        {"id": "noimg", "conversations": conv(("human", "Q?"), ("gpt", "A"))},
        {"id": "two", "image": ["img/a.png", "img/b.png"], "conversations": conv(("human", "Q?"), ("gpt", "A"))},
        "not an object",
        good,
    ]
    source = write_source(images / f"data.{layout}", records, layout)
    report = import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text")
    assert report.read == 5 and report.written == 1
    assert dict(report.problem_counts) == {"image_missing": 1, "no_image": 2, "malformed_record": 1}
    assert read_lines(tmp_path / "pool.jsonl")[0]["id"] == "ok#0"
    # every problem is also in the sidecar file
    sidecar = read_lines(Path(report.problems_path))
    assert len(sidecar) == 4 and {p["reason"] for p in sidecar} == {"image_missing", "no_image", "malformed_record"}


def test_jsonl_bad_lines_are_reported_and_reading_goes_on(images, tmp_path):
    good = json.dumps({"id": "ok", "image": "img/a.png", "conversations": conv(("human", "Q?"), ("gpt", "A"))})
    source = images / "data.jsonl"
    source.write_bytes(b"{broken json\n" + b'{"id": "\xff\xfe"}\n' + good.encode() + b"\n")
    report = import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text")
    assert report.written == 1
    assert [(p.where, p.reason) for p in report.problems] == [("data.jsonl:1", "malformed_json"), ("data.jsonl:2", "not_utf8")]


def test_broken_json_array_reports_the_line_and_keeps_what_came_before(images, tmp_path):
    good = {"id": "ok", "image": "img/a.png", "conversations": conv(("human", "Q?"), ("gpt", "A"))}
    text = json.dumps([good], indent=1)[:-1].rstrip() + ",\n{\"id\": oops}\n]"
    source = images / "data.json"
    source.write_text(text, encoding="utf-8")
    report = import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text")
    assert report.written == 1
    [problem] = report.problems
    assert problem.reason == "malformed_json" and problem.where == f"data.json:{text.count(chr(10), 0, text.index('oops')) + 1}"


def test_family_from_record_then_map_then_option(images, tmp_path):
    records = [
        {"id": "a", "image": "img/a.png", "family": "scene_text", "source": "x", "conversations": conv(("human", "Q?"), ("gpt", "A"))},
        {"id": "b", "image": "img/a.png", "source": "mapped", "conversations": conv(("human", "Q?"), ("gpt", "A"))},
        {"id": "c", "image": "img/a.png", "source": "other", "conversations": conv(("human", "Q?"), ("gpt", "A"))},
    ]
    source = write_source(images / "data.json", records, "json")
    report = import_source("llava", source, tmp_path / "pool.jsonl", family_map={"mapped": "scene_text"})
    assert report.written == 2 and [p.reason for p in report.problems] == ["no_family"]
    assert report.problems[0].id == "c"


def test_field_mapping_renames_record_keys(images, tmp_path):
    records = [{"uid": 7, "img": "img/a.png", "dialog": conv(("user", "Q?"), ("assistant", "A")), "ds": "mine", "from_pool": "benchmark"}]
    source = write_source(images / "data.json", records, "json")
    fields = {"id": "uid", "image": "img", "conversations": "dialog", "dataset": "ds", "origin": "from_pool"}
    import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text", fields=fields)
    [line] = read_lines(tmp_path / "pool.jsonl")
    assert line["id"] == "7#0" and line["source"]["dataset"] == "mine" and line["source"]["origin"] == "benchmark"


def test_origin_defaults_to_the_file_not_benchmark(images, tmp_path):
    source = write_source(images / "infinity_slice.json", [{"id": "a", "image": "img/a.png", "conversations": conv(("human", "Q?"), ("gpt", "A"))}], "json")
    import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text")
    assert read_lines(tmp_path / "pool.jsonl")[0]["source"]["origin"] == "infinity_slice"


def test_image_root_option(images, tmp_path):
    source = write_source(tmp_path / "elsewhere.json", [{"id": "a", "image": "a.png", "conversations": conv(("human", "Q?"), ("gpt", "A"))}], "json")
    report = import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text", image_root=images / "img")
    assert report.written == 1 and read_lines(tmp_path / "pool.jsonl")[0]["image"] == "src/img/a.png"


def test_unknown_family_and_mapping_keys_fail_up_front(images, tmp_path):
    source = write_source(images / "data.json", [], "json")
    with pytest.raises(UnknownNameError, match="did you mean 'scene_text'"):
        import_source("llava", source, tmp_path / "pool.jsonl", family="scene_txt")
    with pytest.raises(OrandCarError, match="unknown field mapping key"):
        import_source("llava", source, tmp_path / "pool.jsonl", family="scene_text", fields={"imag": "x"})


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<image>\nWhat is it?", "What is it?"),
        ("What is it?\n<image>", "What is it?"),
        ("Look at <image> and answer.", "Look at and answer."),
        ("Line one\n<image>\nLine two", "Line one\nLine two"),
        ("no marker", "no marker"),
    ],
)
def test_strip_image_marker(text, expected):
    assert strip_image_marker(text) == expected


def test_conversation_pairs_keeps_turn_indices():
    pairs, problems = conversation_pairs(conv(("system", "be nice"), ("human", "Q"), ("gpt", "A")))
    assert pairs == [(1, "Q", "A")] and problems == []
    assert conversation_pairs("nope")[1][0][1] == "bad_conversations"


def test_json_array_is_read_across_chunk_boundaries(monkeypatch):
    import orandcar_builder.pool.llava as llava

    monkeypatch.setattr(llava, "READ_CHUNK", 7)  # every record spans several reads
    records = [{"id": str(i), "text": "é" * i} for i in range(20)]
    data = json.dumps(records, indent=2, ensure_ascii=False).encode("utf-8")
    got = list(iter_json_array(io.BytesIO(data), "x.json"))
    assert [value for _, value in got] == records
    assert [where for where, _ in got[:2]] == ["x.json:2", "x.json:6"]  # lines of the opening braces


@pytest.mark.parametrize(
    "data, reason",
    [(b"[{\"a\": 1}", "malformed_json"), (b"{\"a\": 1}", "malformed_json"), (b"[{\"a\": \"\xff\"}]", "not_utf8"),
     (b"[{\"a\": 1} {\"b\": 2}]", "malformed_json"), (b"[1] x", "malformed_json")],
)
def test_json_array_defects_are_dropped_records(data, reason):
    got = list(iter_json_array(io.BytesIO(data), "x.json"))
    assert isinstance(got[-1][1], Dropped) and got[-1][1].reason == reason


def test_json_array_yields_records_before_reading_the_whole_file(monkeypatch):
    import orandcar_builder.pool.llava as llava

    monkeypatch.setattr(llava, "READ_CHUNK", 4096)
    data = json.dumps([{"id": str(i), "pad": "x" * 100} for i in range(5000)]).encode()
    fh = io.BytesIO(data)
    records = iter_json_array(fh, "big.json")
    next(records)
    assert fh.tell() <= 2 * 4096 < len(data)  # streamed: one chunk or two, not the whole file
    assert sum(1 for _ in records) == 4999


@settings(max_examples=40, deadline=None)
@given(
    records=st.lists(st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=20), st.integers()), max_size=3), max_size=8),
    indent=st.sampled_from([None, 0, 2]),
    chunk=st.integers(min_value=1, max_value=64),
)
def test_json_array_round_trips_for_any_layout_and_chunk_size(records, indent, chunk):
    import orandcar_builder.pool.llava as llava

    old = llava.READ_CHUNK
    llava.READ_CHUNK = chunk
    try:
        data = json.dumps(records, indent=indent, ensure_ascii=False).encode("utf-8")
        got = [value for _, value in iter_json_array(io.BytesIO(data), "x.json")]
    finally:
        llava.READ_CHUNK = old
    assert got == records


@pytest.mark.parametrize("layout", ["json", "jsonl"])
def test_import_memory_does_not_grow_with_the_source(images, tmp_path, layout, monkeypatch):
    import tracemalloc

    import orandcar_builder.pool.llava as llava

    monkeypatch.setattr(llava, "READ_CHUNK", 16384)  # both sources span many chunks

    def peak(n: int) -> int:
        records = [{"id": f"r{i}", "image": "img/a.png", "conversations": conv(("human", f"Q{i}?" + "x" * 200), ("gpt", "A"))}
                   for i in range(n)]
        source = write_source(images / f"data{n}.{layout}", records, layout)
        del records
        tracemalloc.start()
        try:
            report = import_source("llava", source, tmp_path / f"pool{n}.jsonl", family="scene_text")
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            assert report.written == n

    small, large = peak(300), peak(3000)
    assert large < small * 1.5 + 256 * 1024  # ten times the source, not ten times the memory
