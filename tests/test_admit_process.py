"""The admission on a process of its own (``pipeline.admitproc``): the same records and work files
as an admission in the build's process, and it stops with the build, whatever way the build ends."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from orandcar_builder.childproc import Failed
from orandcar_builder.images import ImagePolicy
from orandcar_builder.pipeline import build, reuse
from orandcar_builder.pipeline.admitproc import (
    AdmissionDone,
    AdmissionProcess,
    AdmissionProcessError,
    AdmitTask,
    AdmittedRows,
    _error_of,
)
from orandcar_builder.pipeline.stages import admit as admit_stage
from orandcar_builder.pipeline.stages.admit import Admission

from .conftest import needs_proc, wait_until_idle, write_png, write_pool
from .test_admit_parallel import _pool, _tree

WORK_FILES = ("admitted.parquet", "dropped.jsonl", "admission_images.parquet", "decisions.parquet",
              "prompts.jsonl", "failed.jsonl")


def _task(pool: Path, work: Path, **changes) -> AdmitTask:
    work.mkdir(parents=True, exist_ok=True)
    time.sleep(2 * reuse.RACY_NS / 1e9)  # the files are older than the admission's start: it is recorded
    fields = dict(pool=pool, work=work, limit=None, images=ImagePolicy(max_bytes=100_000), image_workers=1,
                  families=None, inputs=reuse.Inputs(pool, None, ImagePolicy(max_bytes=100_000)))
    fields.update(changes)
    return AdmitTask(**fields)


def _leftovers(work: Path) -> list[str]:
    return sorted(p.name for p in work.iterdir() if p.name.endswith((".tmp", ".partial")) or "admitted" in p.name
                  or p.name.startswith("dropped"))


@pytest.mark.parametrize("workers", [2, 3])
def test_a_build_admitting_on_its_own_process_gives_the_same_bytes(tmp_path, ocr_engine, workers):
    pool = _pool(tmp_path / "pool")
    results = {}
    for process in (False, True):
        name = "proc" if process else "here"
        result = build(pool, tmp_path / f"out-{name}", work=tmp_path / f"work-{name}", engine=ocr_engine,
                       admit_workers=workers, admit_process=process, max_image_bytes=100_000, progress=False)
        assert result.ok, result.problems
        results[name] = result
    assert _tree(tmp_path / "out-here") == _tree(tmp_path / "out-proc")
    for name in WORK_FILES:
        if name == "admission_images.parquet":  # file stats, one row per file named: same rows
            here = pq.read_table(tmp_path / "work-here" / name).to_pylist()
            assert here == pq.read_table(tmp_path / "work-proc" / name).to_pylist() and here
            continue
        assert (tmp_path / "work-here" / name).read_bytes() == (tmp_path / "work-proc" / name).read_bytes(), name
    here, proc = results["here"].report, results["proc"].report
    for key in ("admitted", "dropped_by_reason", "cleaning"):
        assert here[key] == proc[key], key
    assert proc["admitted"] > 50 and proc["dropped_by_reason"]["duplicate_qa"] >= 1
    # The admission was recorded for reuse there: a rerun takes it as it is.
    rerun = build(pool, tmp_path / "out-again", work=tmp_path / "work-proc", engine=ocr_engine,
                  admit_workers=workers, admit_process=True, max_image_bytes=100_000, progress=False)
    assert any(stage["counters"].get("reused") for stage in rerun.report["stages"])
    assert _tree(tmp_path / "out-again") == _tree(tmp_path / "out-here")


def test_messages_count_every_line_and_end_with_the_report(tmp_path, monkeypatch):
    pool = _pool(tmp_path / "pool")
    lines = sum(1 for _ in open(pool, "rb"))
    messages = list(AdmissionProcess(_task(pool, tmp_path / "work")).messages())
    *rows, done = messages
    assert all(isinstance(m, AdmittedRows) for m in rows) and isinstance(done, AdmissionDone)
    assert sum(m.lines for m in rows) == lines
    assert sum(len(m.rows) for m in rows) == done.admitted == done.clean_report["admitted"]
    assert sum(done.dropped.values()) + done.admitted == lines
    assert len(rows[0].rows) <= 16  # the first rows go out soon
    assert (tmp_path / "work" / "admitted.parquet").is_file() and (tmp_path / "work" / "admission.json").is_file()
    (tmp_path / "work-here").mkdir()
    here = Admission(pool, tmp_path / "work-here", None, {}, ImagePolicy(max_bytes=100_000), process=False)
    here.start()
    assert [r for m in rows for r in m.rows] == list(here.rows())
    assert Counter(done.dropped) == here.dropped and done.clean_report == here.clean_report


def test_an_error_in_the_admission_process_is_raised_here_as_it_is(tmp_path):
    pool = _pool(tmp_path / "pool")
    task = _task(pool, tmp_path / "work")
    pool.unlink()  # gone after the build's start: the read fails in the admission process
    with pytest.raises(FileNotFoundError, match="pool.jsonl"):
        list(AdmissionProcess(task).messages())
    assert _leftovers(tmp_path / "work") == []


def test_an_error_that_cannot_be_sent_as_it_is_keeps_its_text():
    error = _error_of(Failed(b"not a pickle", "ValueError: bad thing\nTraceback ..."))
    assert isinstance(error, AdmissionProcessError) and "ValueError: bad thing" in str(error)


def _big_pool(root: Path, items: int = 3000) -> Path:
    for i in range(50):
        write_png(root / "img" / f"{i}.png", (i, 2 * i, 3 * i))
    lines = [{"id": f"q{i}", "image": f"img/{i % 50}.png", "question": f"What is written? {i}", "answer": "x",
              "family": "scene_text"} for i in range(items)]
    return write_pool(root / "pool.jsonl", lines)


def test_a_build_that_stops_early_ends_the_process_and_removes_its_files(tmp_path):
    pool = _big_pool(tmp_path / "pool")
    work = tmp_path / "work"
    admission = AdmissionProcess(_task(pool, work))
    messages = admission.messages()
    first = next(messages)
    assert isinstance(first, AdmittedRows) and first.rows
    messages.close()  # the consumer stops (an engine error, Ctrl-C)
    assert admission.process.exitcode is not None  # ended, not left running
    assert _leftovers(work) == []


def test_an_admission_process_killed_outright_is_an_error_naming_it(tmp_path):
    pool = _big_pool(tmp_path / "pool")
    admission = AdmissionProcess(_task(pool, tmp_path / "work"))
    messages = admission.messages()
    next(messages)
    os.kill(admission.process.pid, signal.SIGKILL)
    with pytest.raises(AdmissionProcessError, match="ended abruptly.*--admit-workers 1"):
        for _ in messages:
            pass


def test_ctrl_c_is_left_to_the_build(tmp_path):
    pool = _big_pool(tmp_path / "pool")
    admission = AdmissionProcess(_task(pool, tmp_path / "work"))
    messages = admission.messages()
    next(messages)
    os.kill(admission.process.pid, signal.SIGINT)  # as a terminal's Ctrl-C reaches the whole group
    time.sleep(0.2)
    *_, done = list(messages)
    assert isinstance(done, AdmissionDone) and done.admitted == 3000


def test_which_admissions_run_on_a_process_of_their_own(tmp_path, monkeypatch):
    pool = _big_pool(tmp_path / "pool", items=20)
    small = Admission(pool, tmp_path / "work", None, {}, workers=2)
    assert not small.on_process()  # a small pool: its first rows come at once here
    monkeypatch.setattr(admit_stage, "PROCESS_MIN_POOL_BYTES", 1)
    assert Admission(pool, tmp_path / "work", None, {}, workers=2).on_process()
    assert not Admission(pool, tmp_path / "work", None, {}, workers=1).on_process()
    assert not Admission(pool, tmp_path / "work", None, {}, workers=2, process=False).on_process()
    import sys

    main = sys.modules["__main__"]
    monkeypatch.setattr(main, "__spec__", None, raising=False)
    monkeypatch.setattr(main, "__file__", "<stdin>", raising=False)  # python - <<EOF: spawn cannot start
    assert not Admission(pool, tmp_path / "work", None, {}, workers=2).on_process()
    monkeypatch.undo()
    monkeypatch.setattr(admit_stage, "PROCESS_MIN_POOL_BYTES", 1)
    assert Admission(pool, tmp_path / "work", None, {}, workers=1, process=True).on_process()
    # On its own process, the admission is one of the workers: images are checked there with 2,
    # and on workers - 1 more from 3 on.
    for workers, checkers in ((1, 1), (2, 1), (3, 2), (8, 7)):
        admission = Admission(pool, tmp_path / "work", None, {}, workers=workers)
        admission.start()
        assert admission.task(on_process=True).image_workers == checkers
        assert admission.task(on_process=False).image_workers == workers



@needs_proc
def test_a_started_process_opens_no_image_until_its_messages_are_read(tmp_path):
    pool = _big_pool(tmp_path / "pool", items=200)
    admission = AdmissionProcess(_task(pool, tmp_path / "work"))
    t0 = time.perf_counter()
    admission.start()
    try:
        wait_until_idle(admission.process.pid)  # its first pass is done: it waits before the images
        write_png(tmp_path / "pool" / "img" / "7.png", (1, 2, 250))  # changed before it may read it
        messages = list(admission.messages())
    finally:
        admission.close()
    wall = time.perf_counter() - t0
    from orandcar_builder.files import sha256_bytes

    rows = [row for m in messages if isinstance(m, AdmittedRows) for row in m.rows]
    now = sha256_bytes((tmp_path / "pool" / "img" / "7.png").read_bytes())
    assert {row["image_sha256"] for row in rows if row["image"].endswith("/7.png")} == {now}
    assert len(rows) == 200
    assert messages[-1].seconds < wall - 0.5  # its time admitting leaves out the wait (0.5 s at least)


def _admitted_then_changed(tmp_path: Path, monkeypatch) -> tuple[Path, Path, dict[str, bytes]]:
    """A work dir holding a recorded admission of a pool that has since changed (one line less)."""
    monkeypatch.setattr(admit_stage, "PROCESS_MIN_POOL_BYTES", 1)
    pool = _big_pool(tmp_path / "pool", items=300)
    work = tmp_path / "work"
    work.mkdir()
    time.sleep(2 * reuse.RACY_NS / 1e9)  # the files are older than the admission's start: it is recorded
    first = Admission(pool, work, None, {}, workers=2, process=True)
    assert not first.start()
    assert sum(1 for _ in first.rows()) == first.admitted == 300
    kept = {name: (work / name).read_bytes() for name in ("admission.json", "admitted.parquet", "dropped.jsonl")}
    time.sleep(2 * reuse.RACY_NS / 1e9)
    lines = pool.read_text().splitlines(keepends=True)
    pool.write_text("".join(lines[:-1]))  # another pool: not reused, so a process is started
    return pool, work, kept


@needs_proc
@pytest.mark.parametrize("how", ["closed", "go_closed"])
def test_a_started_process_never_let_go_ends_and_leaves_the_last_admission(tmp_path, monkeypatch, how):
    pool, work, kept = _admitted_then_changed(tmp_path, monkeypatch)
    second = Admission(pool, work, None, {}, workers=2)
    second.prepare()
    process = second._process.process
    wait_until_idle(process.pid)  # at the go: its partial files exist
    assert [name for name in _leftovers(work) if name.endswith(".tmp")]
    if how == "closed":  # the build stopped before its generate stage (its engine could not be made)
        second.close()
    else:  # the go pipe alone closed unsent: it ends by itself
        second._process._go.close()
        process.join(30)
        assert process.exitcode == 0
    assert process.exitcode is not None and not process.is_alive()
    assert _leftovers(work) == ["admitted.parquet", "dropped.jsonl"]  # the last admission's, as they were
    assert {name: (work / name).read_bytes() for name in kept} == kept  # still on record
    second.close()
    second.close()  # twice: nothing left to do


def test_an_engine_that_cannot_be_made_stops_the_started_admission(tmp_path, monkeypatch):
    import json
    import multiprocessing

    from orandcar_builder.engines.replay import ReplayFileError

    started = []
    original = AdmissionProcess.start
    monkeypatch.setattr(AdmissionProcess, "start", lambda self: started.append(self) or original(self))
    pool = _big_pool(tmp_path / "pool")
    replay = tmp_path / "replay.jsonl"
    replay.write_text(json.dumps({"id": "q0", "text": "x", "finish_reason": "stop"}) + "\n{not json\n")
    with pytest.raises(ReplayFileError, match="malformed"):
        build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay", engine_options={"replay": replay},
              admit_workers=2, admit_process=True, progress=False)
    assert len(started) == 1 and started[0].process.exitcode is not None  # started before the engine, ended
    assert multiprocessing.active_children() == []
    assert _leftovers(tmp_path / "work") == [] and not (tmp_path / "out").exists()


def test_a_child_leaving_ignores_a_second_sigterm(tmp_path):
    """A SIGTERM that comes while the process already leaves (the build's stop closes the go pipe,
    then terminates it) must not raise a second SystemExit inside the removal of its partial files."""
    import multiprocessing

    from orandcar_builder.childproc import QueuedSender, exit_on_term
    from orandcar_builder.pipeline.admitproc import _admit_and_send

    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit):
            exit_on_term(signal.SIGTERM, None)  # told to end: the next SIGTERM is ignored
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        signal.signal(signal.SIGTERM, before)
        pool = _big_pool(tmp_path / "pool", items=50)
        task = _task(pool, tmp_path / "work")
        receiver, sending = multiprocessing.Pipe(duplex=False)
        go_receiver, go = multiprocessing.Pipe(duplex=False)
        go.close()  # the build stopped: never let go
        sender = QueuedSender(sending, 8, "test-sender")
        with pytest.raises(SystemExit):
            _admit_and_send(task, sender, go_receiver)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        sender.close()
        receiver.close()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert _leftovers(tmp_path / "work") == []  # its partial files removed
