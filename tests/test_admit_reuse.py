"""A rerun reuses the work dir's admission when its inputs are unchanged (pipeline/reuse.py), and
admits again when the pool file, a file its lines name, or an admission setting changed."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orandcar_builder.clean import policy as clean_policy
from orandcar_builder.pipeline import build, reuse
from orandcar_builder.pipeline.report import format_summary
from orandcar_builder.pipeline.stages import admit as admit_stage
from orandcar_builder.workdir import WorkDir

from .conftest import dataset_files, write_png, write_pool

BASE = {"question": "What is written?", "answer": "STOP", "family": "scene_text"}


def _pool(root: Path) -> tuple[Path, Path]:
    """Good items (two per image, one naming its image as source.image), a corrupt image, a missing
    one, a repeated QA item and a malformed line; and the replay recordings of every id."""
    for i in range(6):
        write_png(root / "img" / f"p{i}.png", (40 * i, 200 - 30 * i, 90), size=(24 + i, 16))
    (root / "img" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    lines: list = []
    for i in range(6):
        lines.append({**BASE, "id": f"a{i}", "image": f"img/p{i}.png",
                      "source": {"dataset": "d", "image": f"img/p{i}.png"}})
        lines.append({**BASE, "id": f"b{i}", "image": f"img/p{i}.png", "question": f"Which word? ({i})"})
    lines.append({**BASE, "id": "bad", "image": "img/broken.png"})
    lines.append({**BASE, "id": "gone", "image": "img/later.png"})
    lines.append({**BASE, "id": "again", "image": "img/p0.png", "source": {"dataset": "d"}})  # duplicate_qa of a0
    lines.append('{"id": "half", "image": ')
    pool = write_pool(root / "pool.jsonl", lines)
    ids = [f"{k}{i}" for i in range(6) for k in "ab"] + ["bad", "gone", "again"]
    replay = root / "replay.jsonl"
    replay.write_text("".join(json.dumps({"id": i, "text": "STOP", "finish_reason": "stop"}) + "\n" for i in ids))
    time.sleep(2 * reuse.RACY_NS / 1e9)  # files older than the admission (see reuse.RACY_NS)
    return pool, replay


class Admissions:
    """Counts the admissions run (``admit_records`` calls by the admit stage, in the build's process:
    these pools are too small for a process of their own)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        inner = admit_stage.admit_records

        def counted(*args, **kwargs):
            self.calls += 1
            return inner(*args, **kwargs)

        monkeypatch.setattr(admit_stage, "admit_records", counted)


def _build(pool: Path, replay: Path, out: Path, work: Path, **settings):
    result = build(pool, out, work=work, engine_name="replay", engine_options={"replay": str(replay)},
                   progress=False, **settings)
    assert result.ok, result.problems
    return result


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p): (folder / p).read_bytes() for p in dataset_files(folder)}


def _image_hashes(out: Path) -> set[str]:
    hashes = set()
    for config in ("RS_think", "RS_nothink", "rejected"):
        for shard in (out / config).glob("*.parquet"):
            hashes.update(pq.read_table(shard, columns=["image_sha256"]).column(0).to_pylist())
    return hashes


@pytest.mark.parametrize("overlap", [True, False])
def test_the_second_build_of_an_unchanged_pool_reuses_its_admission(tmp_path, monkeypatch, overlap):
    pool, replay = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    admissions = Admissions(monkeypatch)
    first = _build(pool, replay, tmp_path / "out1", work, overlap_admit=overlap)
    assert admissions.calls == 1 and WorkDir(work).admission.is_file()
    kept = {name: (work / name).read_bytes() for name in ("admitted.parquet", "dropped.jsonl", "decisions.parquet")}
    assert first.report["dropped_by_reason"] == {"duplicate_qa": 1, "image_missing": 1, "image_undecodable": 1,
                                                 "malformed_json": 1}

    second = _build(pool, replay, tmp_path / "out2", work, overlap_admit=overlap)
    assert admissions.calls == 1  # not admitted again
    assert _tree(tmp_path / "out1") == _tree(tmp_path / "out2")
    for name, data in kept.items():
        assert (work / name).read_bytes() == data, name
    for key in ("items", "admitted", "dropped", "dropped_by_reason", "cleaning"):
        assert second.report[key] == first.report[key], key
    assert any(stage.counters.get("reused") for stage in second.stages)
    assert "admission reused" in format_summary(second) and "admission reused" not in format_summary(first)


def _rewrite_keeping_mtime(path: Path, colour) -> int:
    """Other bytes under the same name, with the old mtime put back (as ``cp -p`` would); the mtime."""
    old = path.stat()
    write_png(path, colour, size=(24, 16))
    os.utime(path, ns=(old.st_atime_ns, old.st_mtime_ns))
    return old.st_mtime_ns


def test_an_image_with_other_bytes_is_admitted_again_and_its_new_bytes_used(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    admissions = Admissions(monkeypatch)
    _build(pool, replay, tmp_path / "out", work)
    image = tmp_path / "pool" / "img" / "p0.png"
    before = hashlib.sha256(image.read_bytes()).hexdigest()
    mtime = _rewrite_keeping_mtime(image, (1, 2, 3))
    after = hashlib.sha256(image.read_bytes()).hexdigest()
    assert after != before and image.stat().st_mtime_ns == mtime
    time.sleep(2 * reuse.RACY_NS / 1e9)
    _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 2
    hashes = _image_hashes(tmp_path / "out")
    assert after in hashes and before not in hashes


def test_a_missing_image_that_appears_is_admitted(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    admissions = Admissions(monkeypatch)
    first = _build(pool, replay, tmp_path / "out", work)
    write_png(tmp_path / "pool" / "img" / "later.png", (9, 9, 9))
    time.sleep(2 * reuse.RACY_NS / 1e9)
    second = _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 2
    assert second.report["admitted"] == first.report["admitted"] + 1
    assert "image_missing" not in second.report["dropped_by_reason"]


def test_the_pool_file_is_known_by_its_bytes(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    admissions = Admissions(monkeypatch)
    _build(pool, replay, tmp_path / "out", work)
    pool.write_bytes(pool.read_bytes())  # the same bytes, written again: a new mtime
    _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 1
    text = pool.read_text().replace("Which word? (3)", "Which word? (33)")
    pool.write_text(text)
    time.sleep(2 * reuse.RACY_NS / 1e9)
    result = _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 2
    questions = pq.read_table(work / "admitted.parquet", columns=["question"]).column(0).to_pylist()
    assert "Which word? (33)" in questions and result.report["admitted"] == 12


@pytest.mark.parametrize("change", [
    {"limit": 10},
    {"max_image_bytes": 200},
    {"allow_outside_paths": True},
    "policy",
])
def test_a_changed_admission_setting_admits_again(tmp_path, monkeypatch, change):
    pool, replay = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    admissions = Admissions(monkeypatch)
    _build(pool, replay, tmp_path / "out", work)
    settings = {}
    if change == "policy":
        monkeypatch.setattr(clean_policy, "POLICY_ID", clean_policy.POLICY_ID + "-next")
    else:
        settings = change
    _build(pool, replay, tmp_path / "out", work, **settings)
    assert admissions.calls == 2
    _build(pool, replay, tmp_path / "out", work, **settings)  # and that admission is reused in turn
    assert admissions.calls == 2


def test_a_work_file_changed_by_hand_admits_again(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    admissions = Admissions(monkeypatch)
    _build(pool, replay, tmp_path / "out", work)
    with open(work / "dropped.jsonl", "a", encoding="utf-8") as fh:
        fh.write("{}\n")
    _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 2
    (work / "admitted.parquet").unlink()
    _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 3
    record = json.loads(WorkDir(work).admission.read_text())
    for damaged in ("not json", json.dumps({**record, "figures": {"admitted": 1}}),
                    json.dumps({**record, "scheme": reuse.SCHEME + 1})):
        WorkDir(work).admission.write_text(damaged)
        result = _build(pool, replay, tmp_path / "out", work)
        assert result.report["admitted"] == 12
    assert admissions.calls == 6


def test_an_image_changed_while_it_is_admitted_is_not_recorded(tmp_path):
    image = write_png(tmp_path / "a.png")
    start = time.time_ns()  # the admission starts before the file was last changed
    write_png(image, (1, 1, 1))

    class Rows:
        def __init__(self):
            self.rows = []

        def add(self, row):
            self.rows.append(row)

    named = reuse.NamedFiles(Rows(), start)
    named(str(image))
    assert named.racy
    older = reuse.NamedFiles(Rows(), time.time_ns() + 10 * reuse.RACY_NS)
    older(str(image))
    older(str(tmp_path / "nowhere.png"))
    assert not older.racy and older.file.rows[1]["size"] == -1


def test_a_change_the_stat_missed_is_an_error_and_the_next_build_admits_again(tmp_path, monkeypatch):
    from orandcar_builder.pipeline import BuildError

    pool, replay = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    admissions = Admissions(monkeypatch)
    _build(pool, replay, tmp_path / "out", work)
    write_png(tmp_path / "pool" / "img" / "p1.png", (5, 5, 5), size=(25, 16))
    with monkeypatch.context() as m:
        m.setattr(reuse, "_files_unchanged", lambda images: True)  # as if the stat had not seen it
        with pytest.raises(BuildError, match="changed since it was admitted"):
            _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 1 and not WorkDir(work).admission.exists()
    _build(pool, replay, tmp_path / "out", work)
    assert admissions.calls == 2
