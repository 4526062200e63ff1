"""files: the write that lands whole or not at all, and the chunked readers behind the hashes."""

from __future__ import annotations

import hashlib
import os

import pytest

from orandcar_builder import files


def test_replaced_on_success_renames_only_a_finished_file(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with files.replaced_on_success(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    files.write_text_atomic(target, "new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_failed_rename_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "folder"
    target.mkdir()
    (target / "inside").write_text("x")  # a non-empty folder cannot be replaced by a file
    with pytest.raises(OSError):
        files.write_bytes_atomic(target, b"data", suffix=".tmp")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder"]


def test_hashes_of_a_file_read_in_chunks(tmp_path):
    data = os.urandom(5000)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert files.sha256_of_file(path, chunk=7) == hashlib.sha256(data).hexdigest() == files.sha256_bytes(data)
    sha256, sha1 = hashlib.sha256(), hashlib.sha1()
    files.update_from_file(path, sha256, sha1, chunk=1000)
    assert (sha256.hexdigest(), sha1.hexdigest()) == (hashlib.sha256(data).hexdigest(), hashlib.sha1(data).hexdigest())


@pytest.mark.parametrize("data, mime", [
    (b"\x89PNG\r\n\x1a\n....", "image/png"), (b"\xff\xd8\xff\xe0", "image/jpeg"), (b"GIF89a..", "image/gif"),
    (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"), (b"BM....", "image/bmp"), (b"II*\x00", "image/tiff"),
])
def test_image_format_from_leading_bytes(data, mime):
    assert files.image_format(data)[0] == mime


def test_unknown_image_bytes_have_no_format():
    assert files.image_format(b"RIFF\x00\x00\x00\x00WAVE") is None and files.image_format(b"") is None


def test_a_staged_file_appears_only_when_committed(tmp_path):
    from orandcar_builder.files import JsonLinesFile

    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    staged = JsonLinesFile(target, fsync=True)
    staged.write({"a": "é"})
    staged.write({"b": 2})
    assert target.read_text() == "old\n" and staged.tmp.exists()  # nothing replaced yet
    staged.commit()
    assert target.read_text(encoding="utf-8") == '{"a": "é"}\n{"b": 2}\n'
    assert not staged.tmp.exists() and staged.lines == 2


def test_a_staged_file_is_removed_when_its_block_raises(tmp_path):
    from orandcar_builder.files import JsonLinesFile

    target = tmp_path / "out.jsonl"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with JsonLinesFile(target) as staged:
            staged.write({"a": 1})
            raise RuntimeError("stage failed")
    assert target.read_text() == "old\n" and not staged.tmp.exists()
    with JsonLinesFile(target) as staged:
        staged.write({"a": 1})
    assert target.read_text() == '{"a": 1}\n'


def test_within_resolves_links_and_respects_name_boundaries(tmp_path):
    root = tmp_path / "pool"
    (root / "img").mkdir(parents=True)
    (tmp_path / "pool-other").mkdir()
    (root / "out").symlink_to(tmp_path / "pool-other")
    real_root = os.path.realpath(root)
    assert files.within(str(root), real_root) and files.within(str(root / "img" / "a.png"), real_root)
    assert files.within(root / "img", real_root)  # a Path too (dataset.output passes one)
    assert not files.within(str(tmp_path / "pool-other" / "a.png"), real_root)  # a prefix, not a parent
    assert not files.within(str(root / "out" / "a.png"), real_root)  # a link out of the folder
    assert not files.within(str(root / "img" / ".." / ".." / "x.png"), real_root)


@pytest.mark.parametrize("columns", [
    {"id": ["a", "b\"c", "ünï\n\tcode", "", "\x00\u2028\U0001f600"], "question": ["q", None, "\\", "%s %%", "x"],
     "prompt": [None, None, "<image>", "{}", "y"]},
    {"100%": [1, 2.5, None, True, "s"], "nested": [{"k": [1, "v"]}, [], {}, False, 0]},
    {"id": []},
])
def test_lines_written_from_columns_are_the_bytes_of_records_written_one_by_one(tmp_path, columns):
    by_record, by_columns = tmp_path / "records.jsonl", tmp_path / "columns.jsonl"
    with files.JsonLinesFile(by_record) as out:
        for values in zip(*columns.values()):
            out.write(dict(zip(columns, values)))
    with files.JsonLinesFile(by_columns) as out:
        out.write_columns(columns)
        out.write_columns({})
        assert out.lines == len(next(iter(columns.values())))
    assert by_columns.read_bytes() == by_record.read_bytes()


def test_columns_of_unequal_length_are_refused(tmp_path):
    with files.JsonLinesFile(tmp_path / "x.jsonl") as out, pytest.raises(ValueError):
        out.write_columns({"id": ["a", "b"], "question": ["q"]})


def test_real_paths_of_one_read_are_those_of_realpath(tmp_path):
    """``RealPaths`` (a folder's links resolved once per read) gives ``os.path.realpath``'s answer
    for every kind of name: links to files and folders, chains, relative targets, ``..`` after a
    link, dangling links, loops, missing files, ``.`` and trailing separators."""
    root = tmp_path / "pool"
    (root / "img" / "deep").mkdir(parents=True)
    (tmp_path / "private" / "d").mkdir(parents=True)
    for name in ("img/a.png", "img/deep/b.png", "../private/s.png", "../private/d/t.png"):
        (root / name).write_bytes(b"x")
    (root / "out").symlink_to(tmp_path / "private")  # a folder link out of the pool
    (root / "rel").symlink_to("img/deep")  # relative
    (root / "chain").symlink_to("rel")  # a link to a link
    (root / "img" / "f.png").symlink_to("../../private/s.png")  # a file link out
    (root / "img" / "dangling.png").symlink_to("nowhere.png")
    (root / "loop").symlink_to("loop")
    names = ["img/a.png", "img/deep/b.png", "out/s.png", "out/d/t.png", "out/d/../s.png", "rel/b.png",
             "chain/b.png", "chain/../a.png", "img/f.png", "img/dangling.png", "loop/x.png", "loop",
             "img/missing.png", "missing/x.png", "img/./a.png", "img/deep/..", "img/deep/.", "img/", "out/",
             "img//a.png", "./img/a.png"]
    real = files.RealPaths()
    for _ in range(2):  # the second time from the remembered folders
        for name in names:
            path = os.path.join(str(root), name)
            assert real(path) == os.path.realpath(path), name
    small = files.RealPaths(folders=2)  # fewer folders than the read names: forgotten and resolved again
    for name in names:
        path = os.path.join(str(root), name)
        assert small(path) == os.path.realpath(path), name
    real_root = os.path.realpath(root)
    assert not files.within(str(root / "out" / "s.png"), real_root, real)
    assert files.within(str(root / "chain" / "b.png"), real_root, real)
