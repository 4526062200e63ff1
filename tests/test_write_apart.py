"""The write stage's second core: RS_think (or any configs) written by a process of its own
(``pipeline.writeproc``) gives the bytes of writing every config in the build's process, leaves
no scratch file behind, and its errors reach the build as the build's own (an image changed since
it was admitted: one ``error:`` line)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from orandcar_builder.pipeline import BuildError, build
from orandcar_builder.pipeline.stages import write as write_stage
from orandcar_builder.pipeline.writeproc import ApartWriter

from .conftest import dataset_files, needs_proc, wait_until_idle, write_png, write_pool


def _pool(folder: Path, items: int = 60) -> tuple[Path, Path]:
    """``items`` QA over items // 2 + 1 images (some asked about again far apart), a replay that
    answers two in three right: accepted and rejected rows, several QA items per row."""
    lines, replies = [], []
    for i in range(items):
        image = i // 2 if i % 7 else 0
        path = folder / "images" / f"{image}.png"
        if not path.exists():
            write_png(path, (image * 3 % 256, 40, 200 - image % 200))
        answer = f"W{i}"
        lines.append({"id": f"q{i}", "image": f"images/{image}.png", "question": f"What is written, {i}?",
                      "answer": answer, "family": "scene_text"})
        replies.append({"id": f"q{i}", "text": answer if i % 3 else "nothing", "finish_reason": "stop"})
    pool = write_pool(folder / "pool.jsonl", lines)
    replay = folder / "replay.jsonl"
    replay.write_text("".join(json.dumps(r) + "\n" for r in replies))
    return pool, replay


def _build(pool, replay, root: Path):
    return build(pool, root / "out", work=root / "work", engine_name="replay", engine_options={"replay": str(replay)},
                 progress=False)


@pytest.mark.parametrize("apart", [("RS_think",), ("RS_think", "rejected"), ("RS_nothink",)])
def test_configs_written_apart_have_the_bytes_of_one_process(tmp_path, monkeypatch, apart):
    pool, replay = _pool(tmp_path / "pool")
    monkeypatch.setattr(write_stage, "apart_configs", lambda decisions: ())
    alone = _build(pool, replay, tmp_path / "alone")
    monkeypatch.setattr(write_stage, "apart_configs", lambda decisions: apart)
    started = []
    original = ApartWriter.__init__
    monkeypatch.setattr(ApartWriter, "__init__", lambda self, *a: started.append(a[0]) or original(self, *a))
    both = _build(pool, replay, tmp_path / "both")
    assert started == [apart]  # the second process ran
    assert alone.ok and both.ok and alone.report["accepted"] and alone.report["rejected"]
    files = dataset_files(alone.out)
    assert files == dataset_files(both.out) and len(files) > 5
    for rel in files:
        assert (both.out / rel).read_bytes() == (alone.out / rel).read_bytes(), rel
    assert both.report["configs"] == alone.report["configs"]
    leftovers = [p.name for p in (tmp_path / "both" / "work").iterdir() if p.name.startswith((".write-apart-", ".route-"))]
    assert leftovers == []  # the child's scratch folder and route files are gone


def test_an_image_changed_before_the_apart_process_reads_it_is_the_builds_error(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool", items=20)
    monkeypatch.setattr(write_stage, "apart_configs", lambda decisions: ("RS_think", "RS_nothink", "rejected"))
    original = ApartWriter.write

    def change_then_write(self, *args):
        write_png(tmp_path / "pool" / "images" / "3.png", (1, 2, 3))  # after admission, before any row is written
        original(self, *args)

    monkeypatch.setattr(ApartWriter, "write", change_then_write)
    with pytest.raises(BuildError, match=r"3\.png.*changed since it was admitted"):
        _build(pool, replay, tmp_path / "b")
    assert not (tmp_path / "b" / "out").exists()
    assert [p.name for p in (tmp_path / "b" / "work").iterdir() if p.name.startswith((".write-apart-", ".route-"))] == []


def test_the_apart_process_reports_a_missing_decisions_file_as_an_os_error(tmp_path):
    with ApartWriter(("rejected",), 1 << 20, tmp_path) as child:
        child.write(tmp_path / "decisions.parquet", tmp_path / "out")
        with pytest.raises(OSError) as caught:
            child.result()
    assert "decisions.parquet" in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # the scratch folder is gone


def test_a_build_that_stops_interrupts_the_apart_process_and_leaves_no_partial_file(tmp_path):
    # The build's process fails while the child still runs (here: at once, while it starts): the
    # child is interrupted and waited for, its scratch folder removed, and no half-written shard
    # is left (a child that finished first leaves whole shards, which the staged folder's removal
    # takes with it).
    pool, replay = _pool(tmp_path / "pool", items=30)
    _build(pool, replay, tmp_path / "b")
    decisions = tmp_path / "b" / "work" / "decisions.parquet"
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="the build stopped"):
        with ApartWriter(("rejected",), 1 << 20, decisions.parent) as child:
            child.write(decisions, out)
            process = child.child
            raise RuntimeError("the build stopped")
    assert process.returncode is not None  # ended, not left running
    assert not [p for p in decisions.parent.iterdir() if p.name.startswith((".write-apart-", ".route-"))]
    assert not [p for p in out.rglob("*.partial")] if out.exists() else True


def test_the_apart_process_runs_this_package_not_the_current_folders(tmp_path, monkeypatch):
    """``python -c`` puts the current folder first on sys.path: a package of that name there (another
    checkout, say) must not write the shards."""
    pool, replay = _pool(tmp_path / "pool", items=20)
    monkeypatch.setattr(write_stage, "apart_configs", lambda decisions: ("RS_nothink",))
    here = tmp_path / "here"
    (here / "orandcar_builder").mkdir(parents=True)
    (here / "orandcar_builder" / "__init__.py").write_text("raise SystemExit(5)\n")
    monkeypatch.chdir(here)
    result = _build(pool, replay, tmp_path / "b")
    assert result.ok and result.report["configs"]["RS_nothink"]["rows"] > 0


def _apart_at_any_size(monkeypatch) -> None:
    """The write stage's second process for any number of decisions, as on two cores."""
    monkeypatch.setattr(write_stage, "APART_MIN_DECISIONS", 1)
    monkeypatch.setattr(write_stage, "usable_cpus", lambda: 2)


def _assert_same_bytes(folder: Path, like: Path) -> None:
    for rel in dataset_files(like):
        assert (folder / rel).read_bytes() == (like / rel).read_bytes(), rel


def test_a_process_started_before_the_sort_writes_the_bytes_of_one_process(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    alone = _build(pool, replay, tmp_path / "alone")  # 60 decisions: written in one process
    _apart_at_any_size(monkeypatch)
    events = []
    original_init, original_write = ApartWriter.__init__, ApartWriter.write
    monkeypatch.setattr(ApartWriter, "__init__", lambda self, *a: events.append(("start", a[0])) or original_init(self, *a))
    monkeypatch.setattr(ApartWriter, "write", lambda self, *a: events.append("write") or original_write(self, *a))
    from orandcar_builder.executors import ordering

    original_sort = ordering.sort_by_order
    monkeypatch.setattr("orandcar_builder.pipeline.stages.generate.sort_by_order",
                        lambda *a: events.append("sort") or original_sort(*a))
    ahead = _build(pool, replay, tmp_path / "ahead")
    assert events == [("start", ("RS_nothink",)), "sort", "write"]  # started once, before the sort
    assert ahead.ok and dataset_files(ahead.out) == dataset_files(alone.out)
    _assert_same_bytes(ahead.out, alone.out)
    assert [p.name for p in (tmp_path / "ahead" / "work").iterdir() if p.name.startswith(".write-apart-")] == []


def test_a_ctrl_c_while_the_process_starts_ends_it_quietly(tmp_path, capfd):
    """The terminal's Ctrl-C reaches the child whenever it comes: while its interpreter starts or
    imports the writer (SIGINT blocked until then), it ends with 130 and prints nothing, not a
    KeyboardInterrupt traceback from inside an import."""
    import time

    for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4):
        child = ApartWriter(("rejected",), 1 << 20, tmp_path)
        time.sleep(delay)
        child.child.send_signal(signal.SIGINT)
        assert child.child.wait(60) == 130, delay
        child.close()
    assert list(tmp_path.iterdir()) == [] and capfd.readouterr().err == ""


def test_a_ctrl_c_held_while_the_process_starts_ends_the_child_too(tmp_path, monkeypatch):
    """A Ctrl-C that came while the child was being started is raised when SIGINT is unblocked,
    after the child exists: the build stops there, and the child is killed and reaped, not left."""
    import contextlib
    import subprocess

    from orandcar_builder.pipeline import writeproc

    started = []

    @contextlib.contextmanager
    def held_ctrl_c():
        yield
        raise KeyboardInterrupt  # what the unblock raises for a SIGINT that came meanwhile

    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(writeproc, "sigint_blocked", held_ctrl_c)
    monkeypatch.setattr(writeproc.subprocess, "Popen", popen)
    with pytest.raises(KeyboardInterrupt):
        ApartWriter(("rejected",), 1 << 20, tmp_path)
    assert len(started) == 1 and started[0].returncode is not None
    assert list(tmp_path.iterdir()) == []


@needs_proc
def test_a_started_process_never_handed_a_task_ends_quietly(tmp_path, capfd):
    child = ApartWriter(("rejected",), 1 << 20, tmp_path)
    process = child.child
    child.close()  # the build stopped before its write stage: killed, it had written nothing
    assert process.returncode is not None and list(tmp_path.iterdir()) == []
    waiting = ApartWriter(("rejected",), 1 << 20, tmp_path)
    wait_until_idle(waiting.child.pid)  # imported, waiting for its task
    assert waiting.waiting()
    waiting.child.send_signal(signal.SIGINT)  # the terminal's Ctrl-C reaches it there
    assert waiting.child.wait(60) == 130 and not waiting.waiting()
    waiting.close()
    ended = ApartWriter(("rejected",), 1 << 20, tmp_path)
    ended.child.stdin.close()  # the build's end of the pipe gone, no task sent: it ends by itself
    assert ended.child.wait(60) == 0
    ended.close()
    assert list(tmp_path.iterdir()) == [] and capfd.readouterr().err == ""


def test_a_build_that_fails_after_the_process_started_ends_it(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    _apart_at_any_size(monkeypatch)
    started = []
    original_init = ApartWriter.__init__
    monkeypatch.setattr(ApartWriter, "__init__", lambda self, *a: started.append(self) or original_init(self, *a))

    def fail(*args):
        raise OSError(28, "No space left on device", "decisions.parquet")

    monkeypatch.setattr("orandcar_builder.pipeline.stages.generate.sort_by_order", fail)
    with pytest.raises(BuildError, match="No space left"):
        _build(pool, replay, tmp_path / "b")
    (child,) = started
    assert child.child is None  # stopped and let go by the build's end
    assert [p.name for p in (tmp_path / "b" / "work").iterdir() if p.name.startswith(".write-apart-")] == []


def test_a_started_process_that_died_before_its_task_is_replaced(tmp_path, monkeypatch):
    pool, replay = _pool(tmp_path / "pool")
    alone = _build(pool, replay, tmp_path / "alone")  # 60 decisions: written in one process
    _apart_at_any_size(monkeypatch)
    original = write_stage.WriteStage.prepare
    killed = []

    def prepare_then_kill(self, context, decisions):
        original(self, context, decisions)
        self._ahead.child.kill()  # the system's out-of-memory killer, say, while the build sorts
        killed.append(self._ahead.child.wait())

    monkeypatch.setattr(write_stage.WriteStage, "prepare", prepare_then_kill)
    again = _build(pool, replay, tmp_path / "again")
    assert killed == [-9] and again.ok
    _assert_same_bytes(again.out, alone.out)
