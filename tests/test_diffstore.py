"""``orandcar diff`` keeps both sides on disk (diffstore.py): its Python memory does not grow with
the dataset, its scratch folder goes when it is done, and repeated images and items in one config
are still told apart as the dict-based diff told them (a repeated row keyed ``sha#position``, a
repeated item by its occurrence)."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path

import pytest

from orandcar_builder import diff as diff_module
from orandcar_builder import diffstore
from orandcar_builder.dataset.writer import write_dataset
from orandcar_builder.diff import DiffError, diff_sides, open_side
from orandcar_builder.vocab import CONFIG_NOTHINK, CONFIG_REJECTED, CONFIG_THINK, WRONG_ANSWER

CARD = "---\nlicense: cc-by-4.0\n---\n# test\n"


def _row(i: int, config: str, answer: str = "Word") -> dict:
    data = f"image {i}".encode() * 4
    qa, sources = [], []
    for j in range(2):
        question = f"What word is shown, item {2 * i + j}?"
        if config == CONFIG_REJECTED:
            qa.append({"question": question, "answer": "Word", "wrong_vlm": answer, "reason": WRONG_ANSWER})
        else:
            item = {"question": question, "answer": answer, "org_answer": "Word", "verifier": "alnum"}
            qa.append({"question": question, "think": "t", **item} if config == CONFIG_THINK else item)
        sources.append({"dataset": "d", "split": "s", "id": str(2 * i + j), "origin": "benchmark",
                        "family": "scene_text", "references": ["Word"], "options": []})
    return {"image": {"bytes": data, "path": f"{i}.png"}, "image_sha256": hashlib.sha256(data).hexdigest(),
            "qa": qa, "clean_meta": {"policy": "p", "sources": sources, "actions": []}}


def _folder(path: Path, rows_by_config: dict) -> str:
    write_dataset(path, rows_by_config)
    (path / "README.md").write_text(CARD, encoding="utf-8")
    return str(path)


def _sides(tmp_path: Path, images: int, changed: int):
    def rows(config, new):
        for i in range(images):
            accepted = i % 10 < 7
            if (config == CONFIG_REJECTED) != accepted:
                yield _row(i, config, "Changed" if new and i < changed else "Word")

    configs = (CONFIG_NOTHINK, CONFIG_THINK, CONFIG_REJECTED)
    old = _folder(tmp_path / f"old{images}", {c: rows(c, False) for c in configs})
    new = _folder(tmp_path / f"new{images}", {c: rows(c, True) for c in configs})
    return open_side(old), open_side(new)


def _python_peak(old, new, scratch: Path) -> tuple[int, object]:
    tracemalloc.start()
    try:
        result = diff_sides(old, new, scratch=scratch)
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_python_memory_does_not_grow_with_the_dataset(tmp_path, monkeypatch):
    # small buffers, so that the small side already fills them (the defaults: 4096 items, 1024 rows)
    monkeypatch.setattr(diffstore, "BATCH", 256)
    monkeypatch.setattr(diff_module, "READ_BATCH", 64)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    small_peak, small = _python_peak(*_sides(tmp_path, 300, 20), scratch)
    large_peak, large = _python_peak(*_sides(tmp_path, 2_400, 20), scratch)
    # the same 20 changed images (40 items each config that holds them) on both sizes
    assert small.totals()["changed"] == large.totals()["changed"] == 40
    assert large.configs[CONFIG_NOTHINK]["qa"]["old"] == 8 * small.configs[CONFIG_NOTHINK]["qa"]["old"]
    # dicts of every item would hold ~4 kB per item: 8x the items, 8x the memory
    assert large_peak < 1.5 * small_peak + 2_000_000, (small_peak, large_peak)
    assert list(scratch.iterdir()) == []  # the scratch folders are gone


def test_the_scratch_folder_goes_when_a_side_cannot_be_read(tmp_path):
    old, new = _sides(tmp_path, 50, 0)
    shard = next((Path(new.spec) / CONFIG_REJECTED).glob("train-*.parquet"))
    shard.write_bytes(b"PAR1 damaged")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(DiffError, match="cannot read"):
        diff_sides(old, new, scratch=scratch)
    assert list(scratch.iterdir()) == []


def test_repeated_images_and_items_in_one_config_are_told_apart(tmp_path):
    a, b = _row(1, CONFIG_REJECTED), _row(2, CONFIG_REJECTED)
    twice = dict(a, qa=a["qa"] + a["qa"][:1], clean_meta=dict(a["clean_meta"],
                                                               sources=a["clean_meta"]["sources"] + a["clean_meta"]["sources"][:1]))
    old = open_side(_folder(tmp_path / "old", {CONFIG_REJECTED: [a, b, a, twice]}))
    new = open_side(_folder(tmp_path / "new", {CONFIG_REJECTED: [a, b]}))
    rows = diff_sides(old, new).to_dict()["configs"][CONFIG_REJECTED]["rows"]
    assert rows["old"] == 4 and rows["new"] == 2
    assert rows["removed_keys"] == [f"{a['image_sha256']}#2", f"{a['image_sha256']}#3"]
    qa = diff_sides(old, new).to_dict()["configs"][CONFIG_REJECTED]["qa"]
    assert qa["old"] == 9 and qa["new"] == 4
    assert [k.get("occurrence") for k in qa["removed_keys"]] == [2, 2, 3, 3, 4]
    assert [k["id"] for k in qa["removed_keys"]] == ["2", "3", "2", "3", "2"]


def test_a_full_scratch_disk_is_one_error_naming_tmpdir(tmp_path, monkeypatch):
    import sqlite3

    from click.testing import CliRunner

    from orandcar_builder.cli import main

    old, new = _sides(tmp_path, 20, 2)

    def full(self):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(diffstore.DiffStore, "finish", full)
    res = CliRunner().invoke(main, ["diff", old.spec, new.spec])
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "disk is full" in errors[0] and "TMPDIR" in errors[0], res.output


def test_what_a_diff_keeps_for_its_printout_is_bounded_and_its_counts_exact(tmp_path, monkeypatch):
    """Many differences (every answer changed, a third of the images flipped or removed): a diff
    made with ``keep`` holds at most that many of each kind, counts them all as the full one does,
    prints the same text, and the Python heap does not follow the differences."""
    from orandcar_builder.diff import FLIPS_SHOWN, Listing, format_diff

    def rows(config, new, images):
        for i in range(images):
            accepted = (i % 10 < 7) != (new and i % 3 == 0)  # a third flipped on the new side
            if new and i % 3 == 1 and i % 2:
                continue  # removed
            if (config == CONFIG_REJECTED) != accepted:
                yield _row(i, config, "Changed" if new else "Word")

    def sides(images):
        configs = (CONFIG_NOTHINK, CONFIG_THINK, CONFIG_REJECTED)
        return (open_side(_folder(tmp_path / f"o{images}", {c: rows(c, False, images) for c in configs})),
                open_side(_folder(tmp_path / f"n{images}", {c: rows(c, True, images) for c in configs})))

    def listings(result):
        for config in result.configs.values():
            for part in ("rows", "qa"):
                yield from (config[part][k] for k in ("added", "removed", "changed"))
        yield from result.flipped.values()
        yield from (result.dataset[k] for k in ("added", "removed", "changed"))

    old, new = sides(600)
    full, kept = diff_sides(old, new), diff_sides(old, new, keep=FLIPS_SHOWN)
    assert all(isinstance(listing, Listing) for listing in listings(kept))
    assert max(listing.count for listing in listings(kept)) > 10 * FLIPS_SHOWN  # the differences are many
    assert all(len(listing.kept) <= FLIPS_SHOWN for listing in listings(kept))
    assert [listing.count for listing in listings(kept)] == [listing.count for listing in listings(full)]
    assert [listing.kept for listing in listings(kept)] == [listing.kept[:FLIPS_SHOWN] for listing in listings(full)]
    assert kept.summary() == full.summary() and kept.identical is full.identical is False
    assert format_diff(kept) == format_diff(full)
    with pytest.raises(ValueError, match="kept"):
        kept.to_dict()  # a cut diff cannot stand for --json, which lists every difference
    # the heap of a kept diff does not grow with the differences: 4x the images, 4x the changes
    # (small buffers, so that the small side already fills them; kept all, it grows 2.5x)
    monkeypatch.setattr(diffstore, "BATCH", 256)
    monkeypatch.setattr(diff_module, "READ_BATCH", 64)
    peaks = []
    for images in (600, 2_400):
        tracemalloc.start()
        try:
            diff_sides(*sides(images), keep=FLIPS_SHOWN)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0] + 1_000_000, peaks  # all kept: 2.3 -> 8.9 MB
