"""The hf importer: local parquet / arrow / image folder / save_to_disk sources to pool lines."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from orandcar_builder.errors import OrandCarError, UnknownNameError
from orandcar_builder.images import ImagePolicy
from orandcar_builder.pool import import_source, read_pool
from orandcar_builder.pool.hf import image_suffix
from orandcar_builder.records import PoolItem

datasets = pytest.importorskip("datasets")

OUTSIDE_OK = ImagePolicy(allow_outside_paths=True)  # imported pools name images where they are


def png_bytes(color: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), color).save(buf, "PNG")
    return buf.getvalue()


def jpeg_bytes(color: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buf, "JPEG", quality=70)
    return buf.getvalue()


IMAGES = [png_bytes("red"), jpeg_bytes("blue"), png_bytes("red")]  # the third repeats the first
ROWS = {
    "img": [{"bytes": b, "path": f"orig{i}.bin"} for i, b in enumerate(IMAGES)],
    "q": ["What is written?", "What does it say?", "Read the text."],
    "a": ["STOP", "EXIT", "STOP"],
    "key": ["k0", "k1", "k2"],
}
COLUMNS = {"image": "img", "question": "q", "answer": "a", "id": "key"}


def hf_dataset():
    features = datasets.Features({"img": datasets.Image(), "q": datasets.Value("string"),
                                  "a": datasets.Value("string"), "key": datasets.Value("string")})
    return datasets.Dataset.from_dict(ROWS, features=features)


def make_source(kind: str, root: Path) -> Path:
    ds = hf_dataset()
    if kind == "parquet_file":
        ds.to_parquet(str(root / "train.parquet"))
        return root / "train.parquet"
    if kind == "parquet_folder":
        (root / "pq").mkdir()
        ds.to_parquet(str(root / "pq" / "train-00000.parquet"))
        return root / "pq"
    if kind == "save_to_disk":
        ds.save_to_disk(str(root / "saved"))
        return root / "saved"
    if kind == "arrow_file":
        ds.save_to_disk(str(root / "saved"))
        return next((root / "saved").glob("*.arrow"))
    raise AssertionError(kind)


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("kind", ["parquet_file", "parquet_folder", "save_to_disk", "arrow_file"])
def test_rows_become_lines_and_images_keep_their_bytes(tmp_path, kind):
    source = make_source(kind, tmp_path)
    out = tmp_path / "out" / "pool.jsonl"
    report = import_source("hf", source, out, columns=COLUMNS, family="scene_text", dataset="demo")
    assert (report.read, report.written, report.problems_total) == (3, 3, 0)
    assert report.images_written == 2  # the repeated image is stored once
    lines = read_lines(out)
    assert [l["id"] for l in lines] == ["demo/train/k0", "demo/train/k1", "demo/train/k2"]
    assert [l["answer"] for l in lines] == ["STOP", "EXIT", "STOP"]
    for line, original in zip(lines, IMAGES):
        stored = (out.parent / line["image"]).read_bytes()
        assert stored == original  # never re-encoded
        assert line["source"]["image_sha256"] == hashlib.sha256(original).hexdigest()
    assert lines[0]["image"] == lines[2]["image"] and lines[0]["image"].startswith("images/")
    assert lines[1]["image"].endswith(".jpg") and lines[0]["image"].endswith(".png")
    assert all(isinstance(r, PoolItem) for r in read_pool(out, images=OUTSIDE_OK))


def test_image_folder_with_metadata(tmp_path):
    root = tmp_path / "imf" / "train"
    root.mkdir(parents=True)
    (root / "x.png").write_bytes(IMAGES[0])
    (root / "y.jpg").write_bytes(IMAGES[1])
    (root / "metadata.jsonl").write_text(
        json.dumps({"file_name": "x.png", "label": "STOP"}) + "\n" + json.dumps({"file_name": "y.jpg", "label": "EXIT"}) + "\n")
    out = tmp_path / "pool.jsonl"
    report = import_source("hf", tmp_path / "imf", out, columns={"answer": "label"}, question="What is written?", family="scene_text")
    assert report.written == 2
    stored = sorted((out.parent / l["image"]).read_bytes() for l in read_lines(out))
    assert stored == sorted(IMAGES[:2])


def test_split_option_and_unknown_split(tmp_path):
    root = tmp_path / "pq"
    root.mkdir()
    hf_dataset().to_parquet(str(root / "train.parquet"))
    hf_dataset().select([0]).to_parquet(str(root / "test.parquet"))
    out = tmp_path / "pool.jsonl"
    report = import_source("hf", root, out, columns=COLUMNS, family="scene_text", split="test")
    assert report.written == 1 and read_lines(out)[0]["source"]["split"] == "test"
    with pytest.raises(UnknownNameError, match="did you mean 'test'"):
        import_source("hf", root, out, columns=COLUMNS, family="scene_text", split="tset")


def test_missing_column_names_the_columns_there(tmp_path):
    source = make_source("parquet_file", tmp_path)
    with pytest.raises(UnknownNameError, match="did you mean 'q'"):
        import_source("hf", source, tmp_path / "pool.jsonl", columns={**COLUMNS, "question": "qq"}, family="scene_text")


def test_bad_rows_are_problems_and_write_no_image(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "question": datasets.Value("string"), "answer": datasets.Value("string")})
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": IMAGES[0], "path": None}, {"bytes": IMAGES[1], "path": None}],
         "question": ["Q?", ""], "answer": ["A", "B"]}, features=features)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    out = tmp_path / "out" / "pool.jsonl"
    report = import_source("hf", tmp_path / "d.parquet", out, family="scene_text")
    assert report.written == 1 and [(p.where, p.reason) for p in report.problems] == [("d.parquet[train]:1", "empty_field")]
    assert report.images_written == 1 and len(list((out.parent / "images").iterdir())) == 1


def test_unreadable_source_is_one_clear_error(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(OrandCarError, match="bad.parquet"):
        import_source("hf", bad, tmp_path / "pool.jsonl", family="scene_text")
    assert not (tmp_path / "pool.jsonl").exists()


@pytest.mark.parametrize(
    "data, name, suffix",
    [(IMAGES[0], None, ".png"), (IMAGES[1], "x.png", ".jpg"), (b"GIF89a...", None, ".gif"),
     (b"RIFF\0\0\0\0WEBPVP8 ", None, ".webp"), (b"??", "a.TIFF", ".tiff"), (b"??", None, ".img")],
)
def test_image_suffix_from_signature_then_name(data, name, suffix):
    assert image_suffix(data, name) == suffix


def test_options_and_list_answers_come_through(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "question": datasets.Value("string"),
                                  "answers": datasets.Sequence(datasets.Value("string")),
                                  "choices": datasets.Sequence(datasets.Value("string")), "n": datasets.Value("int64")})
    ds = datasets.Dataset.from_dict(
        {"image": [{"bytes": IMAGES[0], "path": None}] * 2, "question": ["Which?", "How many?"],
         "answers": [["dog"], ["3", "three"]], "choices": [["cat", "dog"], None], "n": [1, 2]}, features=features)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    out = tmp_path / "pool.jsonl"
    import_source("hf", tmp_path / "d.parquet", out, columns={"answer": "answers", "options": "choices", "id": "n"},
                  family="multiple_choice")
    first, second = read_lines(out)
    assert first["options"] == ["cat", "dog"] and first["answer"] == ["dog"] and first["id"].endswith("/1")
    assert "options" not in second and second["answer"] == ["3", "three"]


def test_a_text_options_cell_is_a_problem_not_a_list_of_letters(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "question": datasets.Value("string"),
                                  "answer": datasets.Value("string"), "options": datasets.Value("string")})
    ds = datasets.Dataset.from_dict({"image": [{"bytes": IMAGES[0], "path": None}], "question": ["Which?"],
                                     "answer": ["A"], "options": ["cat, dog"]}, features=features)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    report = import_source("hf", tmp_path / "d.parquet", tmp_path / "pool.jsonl", family="multiple_choice")
    assert report.written == 0 and [p.reason for p in report.problems] == ["bad_field"]
