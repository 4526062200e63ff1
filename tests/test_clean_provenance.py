"""Provenance: the recorded source image must be the attached image."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from PIL import Image

from orandcar_builder.clean import clean
from orandcar_builder.clean.provenance import MISMATCH, UNCHECKED, UNRESOLVED, SourceImageHashes, check_provenance
from orandcar_builder.images import ImageRef
from orandcar_builder.records import Admitted, Dropped, PoolItem, Source


def make_png(path: Path, color: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), color).save(path, "PNG")
    return path


@pytest.fixture
def base(tmp_path: Path) -> Path:
    make_png(tmp_path / "img" / "a.png", "red")
    make_png(tmp_path / "img" / "copy_of_a.png", "red")
    make_png(tmp_path / "img" / "b.png", "blue")
    (tmp_path / "img" / "folder.png").mkdir()
    return tmp_path


def item(base: Path, **source) -> PoolItem:
    return PoolItem(id="x", image=ImageRef.from_file(base / "img" / "a.png"), question="What is written?",
                    reference="STOP", family="scene_text", source=Source(**source), where="pool.jsonl:1")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "source, reason",
    [
        ({"image": "img/a.png"}, None),  # the same file
        ({"image": "img/copy_of_a.png"}, None),  # another file with the same bytes
        ({"image_sha256": "SHA_A"}, None),
        ({"image_sha256": "SHA_A_UPPER"}, None),
        ({"image": "img/a.png", "image_sha256": "SHA_A"}, None),
        ({"image": "img/missing.png"}, UNRESOLVED),
        ({"image": "img/folder.png"}, UNRESOLVED),  # exists but cannot be read as a file
        ({"image": "img/b.png"}, MISMATCH),
        ({"image_sha256": "SHA_B"}, MISMATCH),
        ({"image_sha256": "not-a-hash"}, MISMATCH),
        ({"image": "img/a.png", "image_sha256": "SHA_B"}, MISMATCH),
        ({"image": "img/b.png", "image_sha256": "SHA_A"}, MISMATCH),
    ],
)
def test_recorded_locators_are_checked_against_the_attached_image(base, source, reason):
    hashes = {"SHA_A": sha(base / "img" / "a.png"), "SHA_B": sha(base / "img" / "b.png"),
              "SHA_A_UPPER": sha(base / "img" / "a.png").upper()}
    source = {k: hashes.get(v, v) for k, v in source.items()}
    result = check_provenance(item(base, **source), SourceImageHashes(base))
    assert result.reason == reason and result.checked
    if reason:
        assert result.detail


def test_an_item_recording_neither_is_unchecked_not_dropped(base):
    result = check_provenance(item(base), SourceImageHashes(base))
    assert result.reason is None and not result.checked
    report: dict = {}
    [admitted] = list(clean([item(base)], report, base_dir=base))
    assert isinstance(admitted, Admitted) and admitted.actions == (UNCHECKED,)
    assert report["provenance"] == {"checked": 0, "unchecked": 1, "unresolved": 0, "mismatch": 0}


def test_clean_drops_with_reason_and_counts(base):
    items = [item(base, image="img/a.png"), item(base, image="img/gone.png"), item(base, image="img/b.png")]
    items = [PoolItem(**{**i.__dict__, "id": f"x{n}", "where": f"pool.jsonl:{n + 1}"}) for n, i in enumerate(items)]
    report: dict = {}
    records = list(clean(items, report, base_dir=base))
    assert [type(r).__name__ for r in records] == ["Admitted", "Dropped", "Dropped"]
    assert [(r.reason, r.where, r.id) for r in records[1:]] == [(UNRESOLVED, "pool.jsonl:2", "x1"), (MISMATCH, "pool.jsonl:3", "x2")]
    assert report["provenance"] == {"checked": 1, "unchecked": 0, "unresolved": 1, "mismatch": 1}
    assert records[0].actions == ()


def test_source_paths_resolve_against_base_dir(base, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)  # a current directory where img/b.png does not exist
    [record] = list(clean([item(base, image="img/b.png")], base_dir=base))
    assert isinstance(record, Dropped) and record.reason == MISMATCH


def test_without_base_dir_a_relative_path_is_unchecked_but_a_hash_or_absolute_path_is_checked(base):
    report: dict = {}
    [record] = list(clean([item(base, image="img/b.png")], report))
    assert isinstance(record, Admitted) and record.actions == (UNCHECKED,)
    assert report["provenance"]["unchecked"] == 1
    [record] = list(clean([item(base, image=str(base / "img" / "b.png"))]))
    assert isinstance(record, Dropped) and record.reason == MISMATCH
    [record] = list(clean([item(base, image="img/a.png", image_sha256=sha(base / "img" / "b.png"))]))
    assert isinstance(record, Dropped) and record.reason == MISMATCH


def test_each_source_file_is_hashed_once_while_remembered(base, monkeypatch):
    import orandcar_builder.clean.provenance as provenance

    calls = []
    real = provenance.sha256_file
    monkeypatch.setattr(provenance, "sha256_file", lambda p: calls.append(p) or real(p))
    hashes = SourceImageHashes(base)
    for _ in range(3):
        assert check_provenance(item(base, image="img/copy_of_a.png"), hashes).reason is None
    assert len(calls) == 1
    # Only the last ``keep`` files are remembered: memory stays bounded, a file seen again later
    # is hashed again, with the same verdicts.
    hashes = SourceImageHashes(base, keep=1)
    for name, reason in (("img/copy_of_a.png", None), ("img/b.png", MISMATCH), ("img/copy_of_a.png", None)):
        assert check_provenance(item(base, image=name), hashes).reason == reason
    assert len(calls) == 4 and hashes.digest.cache_info().currsize == 1
