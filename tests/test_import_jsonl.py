"""The jsonl importer (native format, checked and normalised), the dispatcher and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from orandcar_builder.errors import OrandCarError, UnknownNameError
from orandcar_builder.images import ImagePolicy
from orandcar_builder.pool import IMPORTERS, format_import_report, import_source, read_pool
from orandcar_builder.pool.report import PROBLEMS_KEPT, ImportProblem, ImportReport
from orandcar_builder.records import Dropped, PoolItem

OUTSIDE_OK = ImagePolicy(allow_outside_paths=True)  # imported pools name images where they are


def make_png(path: Path, color: str = "red") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), color).save(path, "PNG")
    return path


def line(**overrides) -> dict:
    base = {"id": "a", "image": "img/a.png", "question": "What is written?", "answer": "STOP", "family": "scene_text"}
    base.update(overrides)
    return base


@pytest.fixture
def pool_dir(tmp_path: Path) -> Path:
    make_png(tmp_path / "src" / "img" / "a.png")
    return tmp_path / "src"


def test_lines_are_rewritten_canonically_relative_to_the_new_pool(pool_dir, tmp_path):
    src = pool_dir / "pool.jsonl"
    messy = {"family": "scene_text", "answer": ["STOP", "stop"], "question": "Q?", "image": "img/a.png", "id": "x",
             "source": {"image": "img/a.png", "origin": "benchmark", "dataset": "d", "split": None}}
    src.write_text(json.dumps(messy) + "\n", encoding="utf-8")
    out = tmp_path / "elsewhere" / "deeper" / "pool.jsonl"
    report = import_source("jsonl", src, out)
    assert report.written == 1
    text = out.read_text(encoding="utf-8")
    assert text == json.dumps({"id": "x", "image": "../../src/img/a.png", "question": "Q?", "answer": ["STOP", "stop"],
                               "family": "scene_text", "source": {"dataset": "d", "origin": "benchmark",
                                                                  "image": "../../src/img/a.png"}}) + "\n"
    [item] = list(read_pool(out, images=OUTSIDE_OK))
    assert isinstance(item, PoolItem) and item.image.path == str((pool_dir / "img" / "a.png").resolve())


@pytest.mark.parametrize(
    "raw, reason",
    [
        (b"{not json", "malformed_json"),
        (b'{"id": "\xff"}', "not_utf8"),
        (json.dumps(line(question="What is \ud800?")).encode(), "not_utf8"),  # a lone surrogate escape
        (b"   ", "blank_line"),
        (json.dumps(line(question="  ")).encode(), "empty_field"),
        (json.dumps(line(answer="")).encode(), "empty_field"),
        (json.dumps(line(family="nope")).encode(), "unknown_family"),
        (json.dumps(line(image="img/gone.png")).encode(), "image_missing"),
        (json.dumps({"id": "a"}).encode(), "missing_field"),
        (b"[1, 2]", "malformed_line"),
    ],
)
def test_each_bad_line_is_reported_with_file_and_line(pool_dir, tmp_path, raw, reason):
    src = pool_dir / "pool.jsonl"
    src.write_bytes(json.dumps(line(id="first")).encode() + b"\n" + raw + b"\n")
    report = import_source("jsonl", src, tmp_path / "pool.jsonl")
    assert report.read == 2 and report.written == 1
    assert [(p.where, p.reason) for p in report.problems] == [("pool.jsonl:2", reason)]


def test_unknown_format_and_option_say_did_you_mean(pool_dir, tmp_path):
    with pytest.raises(UnknownNameError, match="did you mean 'jsonl'"):
        import_source("jsnl", pool_dir, tmp_path / "pool.jsonl")
    with pytest.raises(UnknownNameError, match="did you mean 'dataset'"):
        import_source("folder", pool_dir, tmp_path / "pool.jsonl", datset="x")
    with pytest.raises(OrandCarError, match="jsonl importer takes no options; got 'family'"):
        import_source("jsonl", pool_dir, tmp_path / "pool.jsonl", family="scene_text")
    with pytest.raises(OrandCarError, match="no such file"):
        import_source("jsonl", pool_dir / "missing.jsonl", tmp_path / "pool.jsonl")
    assert sorted(IMPORTERS) == ["folder", "hf", "jsonl", "llava"]


def test_options_given_as_none_take_the_importer_default(pool_dir, tmp_path):
    (pool_dir / "IMG").mkdir()
    (pool_dir / "label").mkdir()
    make_png(pool_dir / "IMG" / "1.png")
    (pool_dir / "label" / "1.txt").write_text("HI")
    report = import_source("folder", pool_dir, tmp_path / "pool.jsonl", dataset=None, split=None, family=None)
    assert report.written == 1


def test_a_failed_import_leaves_no_pool_and_keeps_an_old_one(pool_dir, tmp_path, monkeypatch):
    out = tmp_path / "pool.jsonl"
    out.write_text("old\n")
    src = pool_dir / "pool.jsonl"
    src.write_text(json.dumps(line()) + "\n")
    import orandcar_builder.pool.jsonl as jsonl

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(jsonl, "parse_pool_line", boom)
    with pytest.raises(RuntimeError):
        import_source("jsonl", src, out)
    assert out.read_text() == "old\n" and not list(tmp_path.glob("*.partial"))


def test_report_keeps_a_bounded_list_but_counts_and_files_every_problem(tmp_path):
    report = ImportReport(format="jsonl", source="s", out="o", problems_path=str(tmp_path / "p.jsonl"))
    for i in range(PROBLEMS_KEPT + 5):
        report.add_problem(ImportProblem(f"s:{i + 1}", "malformed_json", "bad"))
    report.close()
    assert len(report.problems) == PROBLEMS_KEPT and report.problems_total == PROBLEMS_KEPT + 5
    assert len((tmp_path / "p.jsonl").read_text().splitlines()) == PROBLEMS_KEPT + 5
    text = format_import_report(report)
    assert "malformed_json 1005" in text and "... and 985 more" in text and "s:1: malformed_json: bad" in text


def test_clean_import_has_no_sidecar_and_a_one_line_report(pool_dir, tmp_path):
    src = pool_dir / "pool.jsonl"
    src.write_text(json.dumps(line()) + "\n")
    report = import_source("jsonl", src, tmp_path / "pool.jsonl")
    assert report.problems_path is None and not (tmp_path / "pool.problems.jsonl").exists()
    assert format_import_report(report) == (
        f"imported jsonl {src} -> {tmp_path / 'pool.jsonl'}: 1 source records read, 1 pool lines written, 0 problems")


def test_read_pool_still_yields_dropped_records_in_file_order(pool_dir):
    src = pool_dir / "pool.jsonl"
    src.write_bytes(b"\n" + json.dumps(line()).encode() + b"\n{bad\n" + json.dumps(line(id="b", image="img/x.png")).encode() + b"\n")
    records = list(read_pool(src))
    assert [type(r).__name__ for r in records] == ["Dropped", "PoolItem", "Dropped", "Dropped"]
    assert [r.reason for r in records if isinstance(r, Dropped)] == ["blank_line", "malformed_json", "image_missing"]
    assert len(list(read_pool(src, limit=2))) == 2


def test_repeated_ids_are_written_and_dropped_by_read_pool(pool_dir, tmp_path):
    src = pool_dir / "pool.jsonl"
    src.write_text(json.dumps(line()) + "\n" + json.dumps(line(answer="OTHER")) + "\n")
    out = tmp_path / "pool.jsonl"
    assert import_source("jsonl", src, out).written == 2  # the writer holds no id set: memory stays flat
    records = list(read_pool(out, images=OUTSIDE_OK))
    assert isinstance(records[0], PoolItem) and isinstance(records[1], Dropped) and records[1].reason == "duplicate_id"
