"""Admission on several processes gives exactly the records of one, and overlaps generation: the
first request reaches the engine while the pool is still being admitted."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from orandcar_builder.cli import main
from orandcar_builder.engines.base import EngineUnavailable
from orandcar_builder.images import (
    IMAGE_MISSING,
    IMAGE_OUTSIDE_POOL,
    IMAGE_TOO_LARGE,
    ImageError,
    ImagePolicy,
    ImageRef,
    check_images,
)
from orandcar_builder.pipeline import BuildError, build
from orandcar_builder.pool import jsonl as jsonl_module
from orandcar_builder.pool import prefetch
from orandcar_builder.pool.jsonl import read_pool

from .conftest import dataset_files, write_png, write_pool


def _pool(root: Path) -> Path:
    """Good items (several per image), corrupt, missing, too large and outside images, repeated ids
    (one after a bad image, which does not claim its id), repeated QA, malformed lines."""
    colours = [(i * 37 % 256, i * 91 % 256, i * 53 % 256) for i in range(12)]
    for i, colour in enumerate(colours):
        write_png(root / "img" / f"p{i}.png", colour, size=(32 + i, 20))
    (root / "img" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    (root / "img" / "cut.png").write_bytes((root / "img" / "p3.png").read_bytes()[:60])
    Image.new("RGB", (400, 400)).save(root / "img" / "big.bmp")
    write_png(root.parent / f"{root.name}-outside.png")
    base = {"question": "What is written?", "answer": "x", "family": "scene_text"}
    lines: list = []
    for i in range(60):
        image = f"img/p{i % 12}.png"
        lines.append({**base, "id": f"q{i}", "image": image, "question": f"What is written? ({i % 7})"})
        if i % 9 == 0:
            lines.append({**base, "id": f"bad{i}", "image": "img/broken.png"})
            lines.append({**base, "id": f"bad{i}", "image": image})  # the id was given back: admitted
        if i % 11 == 0:
            lines.append({**base, "id": f"q{i}", "image": image})  # duplicate_id
            lines.append('{"id": "half", "image": ')
            lines.append({**base, "id": f"cut{i}", "image": "img/cut.png"})
            lines.append({**base, "id": f"gone{i}", "image": "img/nowhere.png"})
            lines.append({**base, "id": f"big{i}", "image": "img/big.bmp"})
            lines.append({**base, "id": f"out{i}", "image": f"../{root.name}-outside.png"})
        if i % 13 == 0:
            lines.append({**base, "id": f"again{i}", "image": image, "question": f"What is written? ({i % 7})"})
    lines.append(b"\xff\xfe not utf-8")
    return write_pool(root / "pool.jsonl", lines)


def test_check_images_keeps_the_reason_across_processes(tmp_path):
    good = write_png(tmp_path / "a.png")
    results = check_images([str(good), str(tmp_path / "none.png"), "/etc/hostname"], str(tmp_path), ImagePolicy())
    results = pickle.loads(pickle.dumps(results))  # as a worker process hands them back
    assert isinstance(results[0], ImageRef) and results[0].sha256 == hashlib.sha256(good.read_bytes()).hexdigest()
    assert isinstance(results[1], ImageError) and results[1].reason == IMAGE_MISSING
    assert isinstance(results[2], ImageError) and results[2].reason == IMAGE_OUTSIDE_POOL
    assert "none.png" in str(results[1])


@pytest.mark.parametrize("chunk,cache", [(None, None), (3, 4), (1, 2)])
def test_read_pool_on_two_processes_gives_the_same_records(tmp_path, monkeypatch, chunk, cache):
    pool = _pool(tmp_path / "pool")
    policy = ImagePolicy(max_bytes=100_000)
    if chunk is not None:  # small chunks and a small memory of checks: eviction, paths sent twice
        monkeypatch.setattr(prefetch, "CHUNK_LINES", chunk)
        monkeypatch.setattr(prefetch, "INLINE_FIRST", 0)
        monkeypatch.setattr(jsonl_module, "IMAGE_CHECK_CACHE", cache)
    one = list(read_pool(pool, images=policy, workers=1))
    two = list(read_pool(pool, images=policy, workers=2))
    assert one == two
    reasons = {getattr(r, "reason", "item") for r in one}
    assert {"item", "image_undecodable", IMAGE_MISSING, IMAGE_TOO_LARGE, IMAGE_OUTSIDE_POOL, "duplicate_id",
            "malformed_json", "not_utf8"} <= reasons
    assert any(getattr(r, "id", None) == "bad0" and not hasattr(r, "reason") for r in one)
    limited = list(read_pool(pool, images=policy, workers=2, limit=17))
    assert limited == list(read_pool(pool, images=policy, workers=1, limit=17)) and len(limited) == 17


def test_bad_worker_counts_are_refused(tmp_path):
    pool = _pool(tmp_path / "pool")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="admit workers"):
            list(read_pool(pool, workers=bad))
        with pytest.raises(BuildError, match="admit workers"):
            build(pool, tmp_path / "out", work=tmp_path / "work", admit_workers=bad, progress=False)
    assert 1 <= prefetch.default_workers() <= prefetch.MAX_DEFAULT_WORKERS


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p): (folder / p).read_bytes() for p in dataset_files(folder)}


def test_build_with_one_and_two_admit_workers_is_byte_identical(tmp_path, ocr_engine):
    pool = _pool(tmp_path / "pool")
    results = {}
    for workers in (1, 2):
        result = build(pool, tmp_path / f"out{workers}", work=tmp_path / f"work{workers}", engine=ocr_engine,
                       admit_workers=workers, max_image_bytes=100_000, progress=False)
        assert result.ok, result.problems
        results[workers] = result
    assert _tree(tmp_path / "out1") == _tree(tmp_path / "out2")
    for name in ("dropped.jsonl", "admitted.parquet", "decisions.parquet", "prompts.jsonl", "failed.jsonl"):
        assert (tmp_path / "work1" / name).read_bytes() == (tmp_path / "work2" / name).read_bytes(), name
    report = results[2].report
    assert report["admitted"] == results[1].report["admitted"] > 50
    assert report["dropped_by_reason"] == results[1].report["dropped_by_reason"]
    assert report["dropped_by_reason"]["duplicate_qa"] >= 1


class FirstRequestProbe:
    """Wraps an engine; notes what the work dir held when the first request arrived."""

    def __init__(self, inner, work: Path):
        self.inner, self.work = inner, work
        self.kind, self.can_judge = inner.kind, inner.can_judge
        self.seen: dict = {}

    def fingerprint(self):
        return self.inner.fingerprint()

    def describe(self):
        return self.inner.describe()

    def generation_settings(self):  # what the wrapped engine says of itself (the card's model row)
        return self.inner.generation_settings()

    def generate(self, requests):
        return self.inner.generate(requests)

    def stream(self, requests):
        def probed():
            for request in requests:
                if not self.seen:
                    self.seen = {"admitted": (self.work / "admitted.parquet").exists(),
                                 "admitting": (self.work / "admitted.parquet.tmp").exists()}
                yield request
        from orandcar_builder.engines.base import stream_of

        return stream_of(self.inner, probed())


@pytest.mark.parametrize("overlap", [True, False])
def test_first_request_goes_out_while_the_pool_is_admitted(tmp_path, ocr_engine, overlap):
    pool = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    probe = FirstRequestProbe(ocr_engine, work)
    result = build(pool, tmp_path / "out", work=work, engine=probe, admit_workers=2, overlap_admit=overlap,
                   max_image_bytes=100_000, progress=False)
    assert result.ok, result.problems
    if overlap:
        assert probe.seen == {"admitted": False, "admitting": True}
    else:
        assert probe.seen == {"admitted": True, "admitting": False}
    assert (work / "admitted.parquet").is_file() and not (work / "admitted.parquet.tmp").exists()
    reference = build(pool, tmp_path / "ref", work=tmp_path / "ref_work", engine=ocr_engine, admit_workers=1,
                      overlap_admit=False, max_image_bytes=100_000, progress=False)
    assert _tree(tmp_path / "out") == _tree(reference.out)


class Unavailable(FirstRequestProbe):
    def stream(self, requests):
        next(iter(requests))
        raise EngineUnavailable("the model folder /nowhere does not exist")


def test_a_failed_build_stops_admission_and_leaves_no_partial_files(tmp_path, ocr_engine):
    pool = _pool(tmp_path / "pool")
    work = tmp_path / "work"
    with pytest.raises(EngineUnavailable, match="/nowhere"):
        build(pool, tmp_path / "out", work=work, engine=Unavailable(ocr_engine, work), admit_workers=2,
              max_image_bytes=100_000, progress=False)
    assert not (work / "admitted.parquet.tmp").exists() and not (work / "dropped.jsonl.tmp").exists()
    assert not (work / "admitted.parquet").exists()


def test_cli_admit_workers(tmp_path):
    pool = _pool(tmp_path / "pool")
    runner = CliRunner()
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"o{workers}"
        res = runner.invoke(main, ["build", str(pool), "-o", str(out), "--work", str(tmp_path / f"w{workers}"),
                                   "--no-progress", "--threads", "1", "--admit-workers", workers,
                                   "--max-image-bytes", "100000"])
        assert res.exit_code == 0, res.output
        outs.append(_tree(out))
    assert outs[0] == outs[1]
    res = runner.invoke(main, ["build", str(pool), "-o", str(tmp_path / "x"), "--admit-workers", "0"])
    assert res.exit_code == 2 and "--admit-workers" in res.output


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in fh)
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_workers_end_when_the_build_is_killed(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    pool = _pool(tmp_path / "pool")
    code = ("import multiprocessing, sys, time\n"
            "from orandcar_builder.pool import prefetch\n"
            "from orandcar_builder.pool.jsonl import read_pool\n"
            "prefetch.INLINE_FIRST = 0\n"
            f"records = read_pool({str(pool)!r}, workers=2)\n"
            "next(records)\n"
            "print(' '.join(str(p.pid) for p in multiprocessing.active_children()), flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    try:
        workers = [int(p) for p in proc.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(p) for p in workers)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers), "admission workers outlived their killed build"


def _die(paths, root, policy):  # runs in a worker: as if it were killed
    os._exit(1)


def test_a_worker_that_dies_is_a_clear_error(tmp_path, monkeypatch):
    from orandcar_builder.errors import OrandCarError

    pool = _pool(tmp_path / "pool")
    monkeypatch.setattr(prefetch, "INLINE_FIRST", 0)
    monkeypatch.setattr(prefetch, "check_images", _die)
    with pytest.raises(OrandCarError, match="admission worker process ended abruptly.*--admit-workers 1"):
        list(read_pool(pool, workers=2))
