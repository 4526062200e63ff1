"""Crash safety of streaming generation: ``orandcar build --engine openai_compat`` against a local
server whose answers finish out of order, SIGKILLed several times while requests are in flight,
then rerun: the dataset folder is byte-identical to an uninterrupted build, and no request whose
generation was cached before a run is asked again (counted at the server)."""

from __future__ import annotations

import hashlib
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fake_openai_server import FakeOpenAIServer

from .conftest import REPO, dataset_files, write_png, write_pool

N_ITEMS = 90
CONCURRENCY = 8
KILLS = 3


def _question(i: int) -> str:
    return f"What is written on sign {i}?"


def _delay(question: str) -> float:
    """Seconds an answer is held: a pure function of the question, so completion order differs
    from request order."""
    return 0.01 + (int(hashlib.sha256(question.encode()).hexdigest(), 16) % 7) * 0.015


def _cached_ids(work: Path) -> set[str]:
    db = work / "cache" / "generations.sqlite"
    if not db.exists():
        return set()
    with sqlite3.connect(db) as con:
        try:
            return {row[0] for row in con.execute("SELECT item_id FROM generations")}
        except sqlite3.OperationalError:
            return set()


def _build(pool: Path, out: Path, work: Path, url: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "orandcar_builder.cli", "build", str(pool), "-o", str(out), "--work", str(work),
               "--engine", "openai_compat", "--engine-option", "model=fake-vlm", "--engine-option", f"base_urls={url}",
               "--engine-option", f"concurrency={CONCURRENCY}", "--no-progress"]
    return subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _asked_items(server: FakeOpenAIServer, since: int) -> list[str]:
    """The item ids asked of the server after its ``since``-th request (questions name the sign)."""
    return [q.split("sign ", 1)[1].split("?", 1)[0] for q in server.questions()[since:]]


@pytest.fixture(scope="module")
def crash_pool(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream_crash")
    lines = []
    for i in range(N_ITEMS):
        write_png(root / "img" / f"{i}.png", colour=(i % 256, (7 * i) % 256, (13 * i) % 256))
        lines.append({"id": f"q{i}", "image": f"img/{i}.png", "question": _question(i), "answer": f"word{i}",
                      "family": "scene_text"})
    return write_pool(root / "pool.jsonl", lines)


@pytest.mark.slow
def test_killed_streaming_builds_resume_to_identical_bytes(crash_pool, tmp_path):
    pool = crash_pool
    with FakeOpenAIServer() as server:
        server.delay = _delay
        reference = tmp_path / "reference"
        proc = _build(pool, reference / "out", reference / "work", server.url)
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
        assert len(server.received) == N_ITEMS

        out, work = tmp_path / "out", tmp_path / "work"
        kills = 0
        for k in range(KILLS):
            cached = _cached_ids(work)
            start = len(server.received)
            target = start + 15 + 5 * k
            proc = _build(pool, out, work, server.url)
            deadline = time.monotonic() + 120
            while len(server.received) < target and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            kills += proc.wait(timeout=60) == -signal.SIGKILL
            asked = {f"q{i}" for i in _asked_items(server, start)}
            assert not cached & asked, f"cached generations asked again: {sorted(cached & asked)}"
        cached = _cached_ids(work)
        start = len(server.received)
        proc = _build(pool, out, work, server.url)
        assert proc.wait(timeout=300) == 0, proc.stderr.read().decode()
        asked = {f"q{i}" for i in _asked_items(server, start)}
        assert not cached & asked
        assert kills == KILLS, "every run should have been killed mid-way"
        total_asked = len(server.received) - N_ITEMS  # the reference build asked each once
    files = dataset_files(reference / "out")
    assert files == dataset_files(out)
    for rel in files:
        assert (reference / "out" / rel).read_bytes() == (out / rel).read_bytes(), rel
    assert (work / "failed.jsonl").read_text() == ""
    # Only what was in flight at a kill (at most the window) or finished within the commit bound
    # (cache.COMMIT_SECONDS) before it is asked twice.
    assert total_asked - N_ITEMS <= kills * 2 * CONCURRENCY
    print(f"\nstreaming crash test: {kills} kills, {total_asked} requests for {N_ITEMS} items "
          f"({total_asked - N_ITEMS} asked again: in flight at a kill)")

