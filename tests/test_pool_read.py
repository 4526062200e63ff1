"""read_pool's repeated-id check and purity's first pass keep the ids they have seen in a SpillSet:
the same drops, in the same words, whether the ids stay in memory or spill to disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from orandcar_builder import spill
from orandcar_builder.clean.purity import measure_pool_file
from orandcar_builder.pool import read_pool
from orandcar_builder.records import Dropped, PoolItem


def _line(item_id: str, image: str = "img/a.png", question: str = "What is written?") -> str:
    return json.dumps({"id": item_id, "image": image, "question": question, "answer": "STOP",
                       "family": "scene_text", "source": {"origin": "InfinityMM"}})


@pytest.fixture
def pool(tmp_path: Path) -> Path:
    (tmp_path / "img").mkdir()
    Image.new("RGB", (4, 4), "red").save(tmp_path / "img" / "a.png")
    lines = [_line(f"q{i}") for i in range(50)]
    lines[10] = _line("q3")  # repeats an id seen 7 lines earlier
    lines[45] = _line("q1")  # and one seen 44 lines earlier, long after the spill
    lines[20] = _line("late", image="img/gone.png")  # its image is missing: the id stays free...
    lines[40] = _line("late")  # ...so this line is the first "late" and is admitted
    lines[41] = _line("late")  # and this one repeats it
    lines[30] = _line("q29", question="Describe the picture.")  # off-task, but a repeat: not measured
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _summary(records) -> list[tuple]:
    return [(r.where, r.reason, r.detail, r.id) if isinstance(r, Dropped) else (r.where, r.id) for r in records]


@pytest.mark.parametrize("threshold", [0, 3])
def test_repeated_ids_beyond_the_threshold_are_dropped_alike(pool, tmp_path, monkeypatch, threshold):
    in_memory = _summary(read_pool(pool))
    drops = {r[0]: (r[1], r[2]) for r in in_memory if len(r) == 4}
    assert drops == {
        "pool.jsonl:11": ("duplicate_id", "id 'q3' already used earlier in the pool"),
        "pool.jsonl:21": ("image_missing", drops["pool.jsonl:21"][1]),
        "pool.jsonl:31": ("duplicate_id", "id 'q29' already used earlier in the pool"),
        "pool.jsonl:42": ("duplicate_id", "id 'late' already used earlier in the pool"),
        "pool.jsonl:46": ("duplicate_id", "id 'q1' already used earlier in the pool"),
    }
    assert ("pool.jsonl:41", "late") in in_memory

    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", threshold)
    monkeypatch.setattr(spill, "BATCH", 4)
    scratch = tmp_path / "work"
    scratch.mkdir()
    assert _summary(read_pool(pool, spill_dir=scratch)) == in_memory
    assert list(scratch.iterdir()) == []  # the scratch folder goes when the read ends


def test_an_abandoned_read_leaves_no_scratch_files(pool, tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", 0)
    scratch = tmp_path / "work"
    scratch.mkdir()
    records = read_pool(pool, spill_dir=scratch)
    assert isinstance(next(records), PoolItem)
    assert len(list(scratch.iterdir())) == 1
    records.close()
    assert list(scratch.iterdir()) == []


def test_purity_pass_skips_repeated_ids_beyond_the_threshold(pool, tmp_path, monkeypatch):
    expected = measure_pool_file(pool).to_report()
    # 44 q ids and "late", counted on its first line (whose image is missing); the five repeats,
    # among them the off-task one, are not.
    assert expected["families"]["scene_text"]["mixed"] == 45
    assert expected["families"]["scene_text"]["mixed_off_task"] == 0
    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", 2)
    monkeypatch.setattr(spill, "BATCH", 4)
    assert measure_pool_file(pool, spill_dir=tmp_path).to_report() == expected


def test_lone_surrogate_escapes_are_dropped_and_pairs_kept(tmp_path: Path, monkeypatch):
    """A \\ud800 escape alone decodes to a str that is not Unicode text (UTF-8 cannot hold it, so
    neither parquet nor the spill file can): dropped as not_utf8. A surrogate pair is one code
    point and passes, on disk too."""
    monkeypatch.setattr(spill, "DEFAULT_THRESHOLD", 0)
    (tmp_path / "img").mkdir()
    Image.new("RGB", (4, 4), "red").save(tmp_path / "img" / "a.png")
    path = tmp_path / "pool.jsonl"
    path.write_text("\n".join([_line("q\ud800"), _line("q\U0001F600"), _line("x", question="Why \udfff?"),
                               _line("q\U0001F600")]) + "\n", encoding="utf-8")
    assert "\\ud800" in path.read_text(encoding="utf-8")  # json.dumps wrote the escape
    records = list(read_pool(path))
    assert [(r.where, r.reason) if isinstance(r, Dropped) else (r.where, r.id) for r in records] == [
        ("pool.jsonl:1", "not_utf8"), ("pool.jsonl:2", "q\U0001F600"), ("pool.jsonl:3", "not_utf8"),
        ("pool.jsonl:4", "duplicate_id")]
