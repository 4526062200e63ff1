"""Crash safety: a build killed with SIGKILL at random points and rerun ends byte-identical to an
uninterrupted build, and no request is asked again once its generation was cached."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import REPO, dataset_files, write_png, write_pool

N_ITEMS = 120
KILLS = 6


def _cached_ids(work: Path) -> set[str]:
    db = work / "cache" / "generations.sqlite"
    if not db.exists():
        return set()
    with sqlite3.connect(db) as con:
        return {row[0] for row in con.execute("SELECT item_id FROM generations")}


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _asked(log: Path) -> list[str]:
    """The item ids the engine was asked for, in order (``#`` lines are stage markers)."""
    return [line for line in _lines(log) if not line.startswith("#")]


def _run(args, *, kill_when=None) -> int:
    """Run a build; ``kill_when()`` (polled) says when to SIGKILL it. Returns the exit status."""
    proc = subprocess.Popen([sys.executable, "-m", "tests.crash_build", *map(str, args)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if kill_when is None:
        assert proc.wait(timeout=300) == 0
        return 0
    deadline = time.monotonic() + 120
    while proc.poll() is None and not kill_when() and time.monotonic() < deadline:
        time.sleep(0.005)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=60)


@pytest.fixture(scope="module")
def crash_pool(tmp_path_factory):
    root = tmp_path_factory.mktemp("crash")
    lines, recordings = [], []
    for i in range(N_ITEMS):
        write_png(root / "img" / f"{i}.png", colour=(i % 256, (7 * i) % 256, (13 * i) % 256))
        lines.append({"id": f"q{i}", "image": f"img/{i}.png", "question": "What is written here?",
                      "answer": f"word{i}", "family": "scene_text"})
        text = f"word{i}" if i % 3 else f"wrong{i}"
        recordings.append({"id": f"q{i}", "text": text, "finish_reason": "stop"})
    pool = write_pool(root / "pool.jsonl", lines)
    replay = root / "replay.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in recordings))
    return root, pool, replay


@pytest.mark.slow
def test_killed_builds_resume_to_identical_bytes(crash_pool, tmp_path):
    root, pool, replay = crash_pool
    reference = tmp_path / "reference"
    _run([pool, reference / "out", reference / "work", replay, reference / "asked.log"])

    out, work, log = tmp_path / "out", tmp_path / "work", tmp_path / "asked.log"
    rng = random.Random(1234)
    kills = kills_while_writing = 0
    for k in range(KILLS):
        cached_before = _cached_ids(work)
        asked_before = len(_asked(log))
        lines_before = len(_lines(log))
        if k < KILLS - 2:  # during generation: after a random number of engine batches
            target = asked_before + rng.randint(1, 3) * 4 + rng.randint(0, 3)
            kill_when = lambda target=target: len(_asked(log)) >= target  # noqa: E731
        else:  # while the dataset folder is being written: after a random number of row groups
            groups = rng.randint(1, 3)

            def kill_when(groups=groups, lines_before=lines_before):
                return sum(line.startswith("#write") for line in _lines(log)[lines_before:]) >= groups
        rc = _run([pool, out, work, replay, log], kill_when=kill_when)
        killed = rc == -signal.SIGKILL
        kills += killed
        kills_while_writing += killed and any(line.startswith("#write") for line in _lines(log)[lines_before:])
        asked_now = _asked(log)[asked_before:]
        assert not cached_before & set(asked_now), "a cached generation was asked for again"
    cached_before = _cached_ids(work)
    asked_before = len(_asked(log))
    _run([pool, out, work, replay, log])
    assert not cached_before & set(_asked(log)[asked_before:])

    asked = _asked(log)
    assert set(asked) == {f"q{i}" for i in range(N_ITEMS)}
    reasked = len(asked) - N_ITEMS  # only batches in flight at a kill may be asked twice
    assert reasked <= kills * 4
    files = dataset_files(reference / "out")
    assert files == dataset_files(out)
    for rel in files:
        assert (reference / "out" / rel).read_bytes() == (out / rel).read_bytes(), rel
    assert kills == KILLS, "every run should have been killed mid-way"
    assert kills_while_writing >= 2, "some kills should land while the dataset folder is written"
    print(f"\ncrash test: {kills} kills ({kills_while_writing} while writing the folder), {reasked} requests "
          f"re-asked (in-flight batches), {N_ITEMS} requests")
