"""The folder importer: IMG/N.ext + label/N.txt to pool lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from orandcar_builder.errors import OrandCarError
from orandcar_builder.images import ImagePolicy
from orandcar_builder.pool import format_import_report, import_source, read_pool
from orandcar_builder.pool.folder import DEFAULT_QUESTION, natural_key, strip_label_newline
from orandcar_builder.records import PoolItem

SHARED_SCENE_TEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "scene-text"

OUTSIDE_OK = ImagePolicy(allow_outside_paths=True)  # imported pools name images where they are


def make_png(path: Path, color: str = "red") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), color).save(path, "PNG")
    return path


def make_folder(root: Path, labels: dict[str, bytes], images: list[str]) -> Path:
    (root / "IMG").mkdir(parents=True, exist_ok=True)
    (root / "label").mkdir(parents=True, exist_ok=True)
    for name in images:
        make_png(root / "IMG" / name, "green")
    for stem, data in labels.items():
        (root / "label" / f"{stem}.txt").write_bytes(data)
    return root


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_pairs_become_lines_in_natural_order(tmp_path):
    src = make_folder(tmp_path / "cute_test", {"1": b"HELLO", "2": b"F I N I S H\n", "10": b"SINGH'S"}, ["1.png", "2.png", "10.png"])
    out = tmp_path / "pool.jsonl"
    report = import_source("folder", src, out)
    assert (report.read, report.written, report.problems_total) == (3, 3, 0)
    lines = read_lines(out)
    assert [l["answer"] for l in lines] == ["HELLO", "F I N I S H", "SINGH'S"]
    assert lines[0] == {
        "id": "cute_test/test/1", "image": "cute_test/IMG/1.png", "question": DEFAULT_QUESTION, "answer": "HELLO",
        "family": "scene_text",
        "source": {"dataset": "cute_test", "split": "test", "id": "1", "origin": "benchmark", "image": "cute_test/IMG/1.png"},
    }
    assert all(isinstance(r, PoolItem) for r in read_pool(out, images=OUTSIDE_OK))


def test_options_set_dataset_split_question_family(tmp_path):
    src = make_folder(tmp_path / "x", {"1": b"A"}, ["1.png"])
    import_source("folder", src, tmp_path / "pool.jsonl", dataset="SVT", split="val", question="Read the word.", family="scene_text")
    [line] = read_lines(tmp_path / "pool.jsonl")
    assert line["id"] == "SVT/val/1" and line["question"] == "Read the word."
    assert line["source"]["dataset"] == "SVT" and line["source"]["split"] == "val"


@pytest.mark.parametrize(
    "labels, images, reason, where",
    [
        ({"1": b"OK", "2": b"X"}, ["1.png"], "image_missing", "label/2.txt"),
        ({"1": b"OK"}, ["1.png", "2.png"], "label_missing", "IMG/2.png"),
        ({"1": b"OK", "2": b"\xff\xfe"}, ["1.png", "2.png"], "not_utf8", "label/2.txt"),
        ({"1": b"OK", "2": b"  \n"}, ["1.png", "2.png"], "empty_answer", "label/2.txt"),
        ({"1": b"OK", "2": b"X"}, ["1.png", "2.png", "2.jpg"], "ambiguous_image", "IMG/2.jpg"),
        ({"1": b"OK"}, ["1.png", "notes.md"], "not_an_image", "IMG/notes.md"),
    ],
)
def test_unpaired_or_bad_files_are_problems(tmp_path, labels, images, reason, where):
    src = make_folder(tmp_path / "src", labels, images)
    report = import_source("folder", src, tmp_path / "pool.jsonl")
    assert report.written == 1
    assert [(p.reason, p.where) for p in report.problems] == [(reason, where)]
    assert report.read == report.written + report.problems_total


def test_missing_subfolder_is_an_error_naming_it(tmp_path):
    (tmp_path / "src" / "IMG").mkdir(parents=True)
    with pytest.raises(OrandCarError, match="label/ is missing"):
        import_source("folder", tmp_path / "src", tmp_path / "pool.jsonl")


@pytest.mark.parametrize("text, label", [("A\n", "A"), ("A\r\n", "A"), ("A", "A"), ("A\n\n", "A\n"), (" A ", " A ")])
def test_only_one_trailing_line_break_is_removed(text, label):
    assert strip_label_newline(text) == label


def test_natural_key_sorts_numbers_by_value():
    assert sorted(["10", "2", "b", "1", "a"], key=natural_key) == ["1", "2", "10", "a", "b"]


@pytest.mark.skipif(not SHARED_SCENE_TEXT.is_dir(), reason="../shared/data not present")
def test_shared_cute80_imports_whole(tmp_path):
    report = import_source("folder", SHARED_SCENE_TEXT / "cute80_test", tmp_path / "pool.jsonl", dataset="CUTE80")
    assert (report.read, report.written, report.problems_total) == (288, 288, 0)
    lines = read_lines(tmp_path / "pool.jsonl")
    assert lines[0]["id"] == "CUTE80/test/1" and lines[0]["answer"] == "RONALDO"
    assert not any(l["answer"].endswith("\n") for l in lines)


def _import_and_build(tmp_path, src, pool, *extra):
    """``orandcar import folder SRC -o POOL`` then ``orandcar build POOL`` (default engine)."""
    from click.testing import CliRunner

    from orandcar_builder.cli import main

    runner = CliRunner()
    imported = runner.invoke(main, ["import", "folder", str(src), "-o", str(pool), "--dataset", "X"])
    assert imported.exit_code == 0, imported.output
    built = runner.invoke(main, ["build", str(pool), "-o", str(tmp_path / "DS"), "--work", str(tmp_path / "work"),
                                 "--no-progress", "--admit-workers", "1", *extra])
    report = json.loads((tmp_path / "work" / "report.json").read_text(encoding="utf-8"))
    return imported, built, report


def _word_png(path: Path, word: str) -> Path:
    from PIL import ImageDraw

    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.new("RGB", (160, 48), "white")
    ImageDraw.Draw(image).text((12, 16), word, fill="black")
    image.save(path, "PNG")
    return path


def test_a_pool_the_importer_wrote_builds_without_flags(tmp_path):
    """The pool lies in another folder than the images it names: its import seal lets the build
    admit them (the guard stays for pools nobody sealed here)."""
    src = tmp_path / "data" / "bench"
    for stem, word in (("1", "HELLO"), ("2", "WORLD"), ("3", "CAR")):
        _word_png(src / "IMG" / f"{stem}.png", word)
        (src / "label").mkdir(parents=True, exist_ok=True)
        (src / "label" / f"{stem}.txt").write_text(word + "\n", encoding="utf-8")
    pool = tmp_path / "pools" / "pool.jsonl"
    imported, built, report = _import_and_build(tmp_path, src, pool)
    assert read_lines(pool)[0]["image"] == "../data/bench/IMG/1.png"
    assert "--allow-outside-paths" not in imported.output, imported.output
    assert f"sealed: {tmp_path / 'pools' / 'pool.seal.json'} lets a build on this machine read" in imported.output
    assert (tmp_path / "pools" / "pool.seal.json").is_file()
    assert (report["admitted"], report["dropped"]) == (3, 0), built.output
    assert "image_outside_pool" not in built.output
    assert report["accepted"] + report["rejected"] == 3 and sum(s["rows"] for s in report["configs"].values()) >= 3


def test_a_seal_vouches_only_for_its_own_pool_and_roots(tmp_path, monkeypatch):
    from orandcar_builder.pool.seal import seal_path_for
    from orandcar_builder.records import Dropped

    secret = make_png(tmp_path / "private" / "secret.png")
    src = make_folder(tmp_path / "src", {"1": b"A\n", "2": b"B\n"}, ["1.png"])
    (src / "IMG" / "2.png").symlink_to(secret)  # inside the imported folder, but a link out of it
    pool = tmp_path / "pools" / "pool.jsonl"
    import_source("folder", src, pool)

    def reasons(path: Path = pool) -> dict:
        # either of the two "outside" reasons: the line's image or its source.image (the same file)
        return {r.id: (r.reason.replace("source_", "") if isinstance(r, Dropped) else "admitted")
                for r in read_pool(path)}

    assert reasons() == {"src/test/1": "admitted", "src/test/2": "image_outside_pool"}

    # a hand-written pool beside it, with a copy of the seal: the seal is not its own
    forged = tmp_path / "pools" / "forged.jsonl"
    forged.write_text(json.dumps({"id": "f", "image": "../private/secret.png", "question": "Q?", "answer": "A",
                                  "family": "scene_text"}) + "\n", encoding="utf-8")
    seal = json.loads(seal_path_for(pool).read_text(encoding="utf-8"))
    seal_path_for(forged).write_text(json.dumps({**seal, "roots": [str(tmp_path)]}), encoding="utf-8")
    assert reasons(forged) == {"f": "image_outside_pool"}
    seal["pool_sha256"] = __import__("hashlib").sha256(forged.read_bytes()).hexdigest()
    seal_path_for(forged).write_text(json.dumps(seal), encoding="utf-8")
    assert reasons(forged) == {"f": "image_outside_pool"}  # the MAC does not check

    # the sealed pool edited after its import
    with open(pool, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "x", "image": "../src/IMG/1.png", "question": "Q?", "answer": "A",
                             "family": "scene_text"}) + "\n")
    assert set(reasons().values()) == {"image_outside_pool"}

    # pool and seal unchanged, read on a machine with another key
    import_source("folder", src, pool)
    assert reasons()["src/test/1"] == "admitted"
    monkeypatch.setenv("ORANDCAR_CONFIG_DIR", str(tmp_path / "other-machine"))
    assert reasons()["src/test/1"] == "image_outside_pool"


def test_without_a_key_the_import_writes_no_seal_and_says_which_flag_builds_it(tmp_path, monkeypatch):
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("ORANDCAR_CONFIG_DIR", str(tmp_path / "not-a-folder" / "orandcar"))  # cannot be made
    src = make_folder(tmp_path / "src", {"1": b"A\n"}, ["1.png"])
    report = import_source("folder", src, tmp_path / "pools" / "pool.jsonl")
    assert report.sealed is None and report.paths_outside == 1
    assert not (tmp_path / "pools" / "pool.seal.json").exists()
    assert "build this pool with --allow-outside-paths" in format_import_report(report)


def test_an_import_that_names_images_outside_its_roots_says_how_to_build_it(tmp_path):
    """A line that names an image outside the pool's folder and outside the folder the import
    read (a jsonl pool naming a file elsewhere) gets no seal: the import says so, and the build's
    summary names the flag when it drops them."""
    from click.testing import CliRunner

    from orandcar_builder.cli import main

    make_png(tmp_path / "shared" / "a.png")
    source = tmp_path / "src" / "in.jsonl"
    source.parent.mkdir()
    source.write_text(json.dumps({"id": "a", "image": "../shared/a.png", "question": "Q?", "answer": "A",
                                  "family": "scene_text"}) + "\n", encoding="utf-8")
    runner = CliRunner()
    imported = runner.invoke(main, ["import", "jsonl", str(source), "-o", str(tmp_path / "pools" / "p.jsonl")])
    assert imported.exit_code == 0, imported.output
    assert "image paths lie outside the pool file's folder: build this pool with --allow-outside-paths" in imported.output

    make_folder(tmp_path / "bench", {"1": b"HARBOR\n"}, ["1.png"])
    inside = runner.invoke(main, ["import", "folder", str(tmp_path / "bench"), "-o", str(tmp_path / "bench" / "p.jsonl"),
                                  "--family", "scene_text", "--dataset", "X", "--split", "test"])
    assert inside.exit_code == 0 and "outside" not in inside.output, inside.output
    assert not (tmp_path / "bench" / "p.seal.json").exists()  # nothing outside: no seal needed

    (tmp_path / "none.jsonl").write_text("", encoding="utf-8")  # no recorded answers: nothing reaches an engine
    built = runner.invoke(main, ["build", str(tmp_path / "pools" / "p.jsonl"), "-o", str(tmp_path / "DS"),
                                 "--work", str(tmp_path / "work"), "--engine", "replay",
                                 "--replay", str(tmp_path / "none.jsonl")])
    assert "outside the pool file's folder" in built.output and "--allow-outside-paths" in built.output, built.output


def test_a_cleaned_copy_of_an_imported_pool_keeps_its_seal(tmp_path):
    """import -> clean into another folder -> build: the cleaned pool's images passed the imported
    pool's guard, so it is sealed with the same folders; with the guard turned off it is not."""
    from orandcar_builder.clean import clean_pool
    from orandcar_builder.pool.seal import seal_path_for
    from orandcar_builder.records import Dropped

    src = make_folder(tmp_path / "data" / "src", {"1": b"A\n", "2": b"B\n"}, ["1.png", "2.png"])
    pool = tmp_path / "pools" / "pool.jsonl"
    import_source("folder", src, pool)
    cleaned = tmp_path / "cleaned" / "pool.jsonl"
    clean_pool(pool, cleaned)
    assert seal_path_for(cleaned).is_file()
    assert not any(isinstance(r, Dropped) for r in read_pool(cleaned)) and len(list(read_pool(cleaned))) == 2

    hand = tmp_path / "hand" / "pool.jsonl"  # names the same images, but nobody sealed it
    hand.parent.mkdir()
    hand.write_text(pool.read_text(encoding="utf-8"), encoding="utf-8")  # same depth: the same ../data paths
    flagged = tmp_path / "flagged" / "pool.jsonl"
    clean_pool(hand, flagged, images=OUTSIDE_OK)
    assert not seal_path_for(flagged).exists()
    assert {r.reason for r in read_pool(flagged)} <= {"image_outside_pool", "source_image_outside_pool"}
    assert len(list(read_pool(flagged))) == 2
