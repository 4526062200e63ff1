"""The one cached, streaming generation path (executors.generation.CachedGeneration): each
distinct request is asked once, what the cache holds is never asked, completions are yielded as
they land and committed in bounded batches while the stream runs, nothing of the pool is read
ahead of the engine, and the judge pass, ``orandcar calibrate`` and both executors go through it."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from orandcar_builder.cache import CacheError, CacheStats, GenerationCache
from orandcar_builder.cli import main
from orandcar_builder.engines.base import Completion
from orandcar_builder.executors import generation
from orandcar_builder.executors.generation import (
    COMMIT_ENTRIES,
    CachedGeneration,
    cached_generation,
    generate_through_cache,
)
from orandcar_builder.executors.steps import SAME_REQUEST_FAILED
from orandcar_builder.pipeline import build
from orandcar_builder.records import Generation, Request

from .conftest import write_png, write_pool

FP = {"kind": "counting", "model": "m"}


def req(item_id: str, question: str | None = None) -> Request:
    return Request(item_id, question if question is not None else f"Q {item_id}", "scene_text")


class Counting:
    """A streaming engine: holds up to ``window`` requests and finishes them in a seeded random
    order; counts every question asked; ``finish`` / ``fail`` name questions answered badly."""

    kind, can_judge = "counting", True

    def __init__(self, window=5, seed=0, finish=None, fail=(), on_pull=None):
        self.window, self.rng = window, random.Random(seed)
        self.finish, self.fail = finish or {}, set(fail)
        self.asked: list[str] = []
        self.on_pull = on_pull

    def fingerprint(self):
        return dict(FP)

    def stream(self, requests):
        held, iterator = [], iter(requests)
        while True:
            for request in iterator:
                self.asked.append(request.question)
                if self.on_pull is not None:
                    self.on_pull(request)
                held.append(request)
                if len(held) >= self.window:
                    break
            if not held:
                return
            request = held.pop(self.rng.randrange(len(held)))
            if request.question in self.fail:
                yield Completion(request, error="server error")
                continue
            text = f"A:{request.question}"
            yield Completion(request, Generation(request.item_id, text, "", text,
                                                 self.finish.get(request.question, "stop"), "m"))


@pytest.fixture
def cache(tmp_path):
    with GenerationCache(tmp_path / "g.sqlite") as c:
        yield c


def run(engine, requests, cache, stats=None):
    with cached_generation(cache, engine, stats) as path:
        return list(path.stream(engine, requests, batch_size=3))


def test_a_request_repeated_in_the_pool_is_asked_once_and_answers_each(cache):
    engine = Counting()
    stats = CacheStats()
    requests = [req(f"i{i}", f"question {i % 4}") for i in range(12)]
    out = run(engine, requests, cache, stats)
    assert sorted(engine.asked) == [f"question {i}" for i in range(4)]
    assert sorted(c.request.item_id for c in out) == sorted(r.item_id for r in requests)
    assert all(c.generation.item_id == c.request.item_id for c in out)
    assert {c.request.item_id: c.generation.final_answer for c in out} == {
        r.item_id: f"A:{r.question}" for r in requests}
    assert (stats.total, stats.asked, stats.shared, stats.hits, stats.stored) == (12, 4, 8, 0, 4)


def test_a_cached_request_is_not_asked_and_is_answered_before_the_engine_is(cache):
    run(Counting(), [req("a"), req("b")], cache)
    engine = Counting()
    stats = CacheStats()
    out = run(engine, [req("a2", "Q a"), req("c"), req("b2", "Q b")], cache, stats)
    assert engine.asked == ["Q c"]
    assert [c.request.item_id for c in out][:2] == ["a2", "b2"]  # hits first: no wait on the engine
    assert (stats.hits, stats.asked, stats.shared) == (2, 1, 0)


def test_a_request_sharing_a_failed_or_incomplete_ask_fails_and_is_asked_again_next_run(cache):
    engine = Counting(fail={"bad"}, finish={"cut": "abort"})
    requests = [req("x1", "bad"), req("y1", "cut"), req("x2", "bad"), req("y2", "cut")]
    out = {c.request.item_id: c for c in run(engine, requests, cache)}
    assert out["x1"].error == "server error" and out["y1"].generation.finish_reason == "abort"
    assert out["x2"].error == out["y2"].error == SAME_REQUEST_FAILED
    assert sorted(engine.asked) == ["bad", "cut"] and len(cache) == 0
    again = Counting()
    run(again, requests, cache)
    assert sorted(again.asked) == ["bad", "cut"]


def test_completions_are_committed_in_bounded_batches_while_the_stream_runs(cache, monkeypatch):
    sizes = []
    put_many = GenerationCache.put_many

    def recording(self, fingerprint, entries):
        sizes.append(len(entries))
        return put_many(self, fingerprint, entries)

    monkeypatch.setattr(GenerationCache, "put_many", recording)
    n = 10 * COMMIT_ENTRIES
    engine = Counting(window=16)
    stats = CacheStats()
    committed_while_streaming = 0
    with cached_generation(cache, engine, stats) as path:
        for i, _completion in enumerate(path.stream(engine, (req(str(i)) for i in range(n)))):
            if i == n - 1:
                path.commits.flush()
                committed_while_streaming = len(cache)
        assert not path.commits._pending
    assert len(cache) == n and stats.stored == n
    assert committed_while_streaming == n  # flushed before the stream ended
    assert max(sizes) <= COMMIT_ENTRIES and len(sizes) >= n // COMMIT_ENTRIES
    assert stats.batches == len(sizes)


def test_requests_are_taken_as_the_engine_wants_them(cache):
    taken = []

    def source():
        for i in range(5000):
            taken.append(i)
            yield req(str(i))

    first_seen = []
    engine = Counting(window=8)
    with cached_generation(cache, engine) as path:
        for _completion in path.stream(engine, source()):
            if not first_seen:
                first_seen.append(len(taken))
    assert first_seen[0] <= generation.CLASSIFY_BATCH + 8  # not the whole pool before the first answer


def test_completions_are_yielded_in_the_order_they_land(cache):
    landed = []
    engine = Counting(window=6, seed=3)
    original = engine.stream

    def recording(requests):
        for completion in original(requests):
            landed.append(completion.request.item_id)
            yield completion

    engine.stream = recording
    out = run(engine, [req(str(i)) for i in range(30)], cache)
    assert [c.request.item_id for c in out] == landed != sorted(landed, key=int)


def test_a_long_run_of_hits_is_never_queued_beyond_the_bound(cache, monkeypatch):
    monkeypatch.setattr(generation, "MAX_READY", 8)
    monkeypatch.setattr(generation, "CLASSIFY_BATCH", 4)
    run(Counting(), [req(f"h{i}") for i in range(200)], cache)  # cached now
    most = []
    engine = Counting(window=4)
    requests = [req(f"n{i}") for i in range(3)] + [req(f"h{i}") for i in range(200)] + [req("last")]
    with cached_generation(cache, engine) as path:
        original = path._drain

        def watched():
            most.append(len(path._ready))
            return original()

        path._drain = watched
        out = list(path.stream(engine, requests, batch_size=2))
    assert sorted(c.request.item_id for c in out) == sorted(r.item_id for r in requests)
    assert sorted(engine.asked) == sorted(["Q n0", "Q n1", "Q n2", "Q last"])
    assert max(most) <= 8 + 4


def test_without_a_cache_every_request_is_asked():
    engine = Counting()
    stats = CacheStats()
    gens = generate_through_cache(engine, [req("a", "same"), req("b", "same")], None, stats=stats)
    assert [g.item_id for g in gens] == ["a", "b"] and engine.asked == ["same", "same"]
    assert (stats.total, stats.asked, stats.hits) == (2, 2, 0)


# --- the four callers ------------------------------------------------------------------------


@pytest.fixture
def made(monkeypatch):
    """Every CachedGeneration made, as (fingerprint kind, stream used)."""
    made: list[dict] = []
    init, stream = CachedGeneration.__init__, CachedGeneration.stream

    def spy_init(self, cache, fingerprint, *args, **kwargs):
        init(self, cache, fingerprint, *args, **kwargs)
        made.append({"kind": fingerprint.get("kind"), "cache": cache is not None, "streamed": False, "self": self})

    def spy_stream(self, *args, **kwargs):
        next(m for m in made if m["self"] is self)["streamed"] = True
        return stream(self, *args, **kwargs)

    monkeypatch.setattr(CachedGeneration, "__init__", spy_init)
    monkeypatch.setattr(CachedGeneration, "stream", spy_stream)
    return made


def _pool(root: Path) -> tuple[Path, Path, Path]:
    """Two items; a replay file answering STOP (a accepted, b rejected: sent to the judge) and
    the judge's verdicts."""
    write_png(root / "images" / "a.png", (200, 30, 30))
    write_png(root / "images" / "b.png", (30, 200, 30))
    lines = [
        {"id": "a", "image": "images/a.png", "question": "What is written?", "answer": "STOP", "family": "scene_text"},
        {"id": "b", "image": "images/b.png", "question": "What is written?", "answer": "EXIT", "family": "scene_text"},
    ]
    pool = write_pool(root / "pool.jsonl", lines)
    replay = root / "replay.jsonl"
    replay.write_text("".join(json.dumps({"id": i, "text": "STOP", "finish_reason": "stop"}) + "\n" for i in "ab"))
    verdicts = root / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps({"id": i, "text": "Verdict: CORRECT"}) + "\n" for i in "ab"))
    return pool, replay, verdicts


def test_the_build_the_judge_pass_and_calibrate_use_the_one_path(tmp_path, made):
    pool, replay, verdicts = _pool(tmp_path)
    result = build(pool, tmp_path / "out", work=tmp_path / "work", engine_name="replay",
                   engine_options={"replay": replay}, judge="replay", judge_options={"replay": verdicts},
                   calibrate=5, progress=False)
    assert result.ok, result.problems
    kinds = [m["kind"] for m in made if m["streamed"]]
    assert kinds[0] == "replay" and len(kinds) >= 2  # the local executor, then the judge pass (and calibration)
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert report["cache"]["generate"]["asked"] == 2 and report["cache"]["judge"]["total"] >= 1

    made.clear()
    done = CliRunner().invoke(main, ["calibrate", "--work", str(tmp_path / "work"), "-n", "2", "--judge", "replay",
                                     "--judge-replay", str(verdicts)])
    assert done.exit_code == 0, done.output
    assert made and all(m["streamed"] and m["cache"] for m in made)


def test_the_ray_executor_uses_the_one_path(tmp_path, made):
    pytest.importorskip("ray")
    from orandcar_builder.engines import create_engine
    from orandcar_builder.executors.base import EngineFactory, GenerationJob
    from orandcar_builder.executors.ray_data import RayExecutor

    pool, replay, _ = _pool(tmp_path)
    work = tmp_path / "work"
    assert build(pool, tmp_path / "out", work=work, engine_name="replay", engine_options={"replay": replay},
                 progress=False).ok
    made.clear()
    engine = create_engine("replay", replay=replay)
    stats = CacheStats()
    with GenerationCache(work / "cache" / "generations.sqlite") as cache:
        job = GenerationJob(admitted=work / "admitted.parquet", work=work, engine=engine,
                            factory=EngineFactory("replay", {"replay": replay}), cache=cache, stats=stats,
                            batch_size=4)
        chunks = list(RayExecutor().run(job))  # everything is cached: no cluster is started
    assert [m["cache"] for m in made] == [True]
    assert sorted(row["id"] for c in chunks for row in c.rows) == ["a", "b"]
    assert (stats.total, stats.hits, stats.asked) == (2, 2, 0)


def _recording_commits(monkeypatch) -> list[tuple[str, int]]:
    """Every ``put_many`` from now on, as (the committing thread's name, entries)."""
    import threading

    commits = []
    put_many = GenerationCache.put_many

    def recording(self, fingerprint, entries):
        commits.append((threading.current_thread().name, len(entries)))
        return put_many(self, fingerprint, entries)

    monkeypatch.setattr(GenerationCache, "put_many", recording)
    return commits


def _held_writer(monkeypatch):
    """``_recording_commits``, with the buffer's writer thread held before each of its commits
    (a slow disk) until the returned event is set."""
    import threading

    commits = _recording_commits(monkeypatch)
    recorded = GenerationCache.put_many
    release = threading.Event()

    def slow_writer(self, fingerprint, entries):
        if threading.current_thread().name == "cache-commits":
            release.wait(10)
        return recorded(self, fingerprint, entries)

    monkeypatch.setattr(GenerationCache, "put_many", slow_writer)
    return commits, release


def _wait_for(condition, seconds: float = 10.0) -> bool:
    import time

    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def test_the_commit_buffer_commits_each_full_transaction_at_once_on_its_writer(tmp_path, monkeypatch):
    """A full transaction's worth is committed as soon as it is added, long before ``max_seconds``,
    by the buffer's writer thread: the caller (the build's main thread) does not wait for SQLite.
    What is below the count waits for the time bound or ``close``."""
    from orandcar_builder.executors.generation import CommitBuffer

    commits = _recording_commits(monkeypatch)
    stats = CacheStats()
    with CommitBuffer(tmp_path / "g.sqlite", FP, max_entries=5, max_seconds=60, stats=stats) as buffer:
        for i in range(23):
            text = f"A:{i}"
            buffer.add(f"k{i}", Generation(str(i), text, "", text, "stop", "m"))
        assert _wait_for(lambda: stats.stored == 20), stats  # four full transactions, the minute not waited for
        assert len(buffer._pending) == 3 and stats.batches == 4
        assert {name for name, _ in commits} == {"cache-commits"}
    assert stats.stored == 23 and stats.batches == 5 and max(n for _, n in commits) <= 5
    with GenerationCache(tmp_path / "g.sqlite") as cache:
        assert len(cache) == 23


def test_the_commit_buffer_caller_commits_itself_when_the_writer_falls_behind(tmp_path, monkeypatch):
    """Backpressure: while the writer is slow (a slow disk), the entries not committed stay below
    BACKLOG_TRANSACTIONS full transactions: past that the caller commits a full one itself as it
    adds, so a process killed at any moment loses a bounded number of generations."""

    from orandcar_builder.executors.generation import BACKLOG_TRANSACTIONS, CommitBuffer

    commits, release = _held_writer(monkeypatch)
    stats = CacheStats()
    most, bound = 0, 4 * BACKLOG_TRANSACTIONS
    with CommitBuffer(tmp_path / "g.sqlite", FP, max_entries=4, max_seconds=60, stats=stats) as buffer:
        for i in range(200):
            text = f"A:{i}"
            buffer.add(f"k{i}", Generation(str(i), text, "", text, "stop", "m"))
            most = max(most, len(buffer._pending))
            if i == 3:
                assert _wait_for(lambda: buffer._writer_busy)  # the writer took the first four and hangs
        callers = [n for name, n in commits if name != "cache-commits"]
        assert callers and all(n == 4 for n in callers), commits
        assert most <= bound, most
        release.set()
    assert stats.stored == 200
    with GenerationCache(tmp_path / "g.sqlite") as cache:
        assert len(cache) == 200


def test_the_commit_buffer_caller_commits_a_full_transaction_the_writer_let_wait(tmp_path, monkeypatch):
    """The time bound holds when the writer is slow (it shares the interpreter lock with a busy
    caller): a full transaction that has waited ``max_seconds`` is committed by the caller at its
    next add, far below the backlog's count."""
    import time

    from orandcar_builder.executors.generation import CommitBuffer

    commits, release = _held_writer(monkeypatch)

    def gen(i):
        return Generation(str(i), f"A:{i}", "", f"A:{i}", "stop", "m")

    with CommitBuffer(tmp_path / "g.sqlite", FP, max_entries=4, max_seconds=0.2) as buffer:
        buffer.add_many([(f"k{i}", gen(i)) for i in range(4)])
        assert _wait_for(lambda: buffer._writer_busy)  # the writer took them and hangs
        buffer.add_many([(f"k{i}", gen(i)) for i in range(4, 8)])  # a full one waits
        assert not [c for c in commits if c[0] != "cache-commits"]
        time.sleep(0.3)
        buffer.add("k8", gen(8))
        assert [n for name, n in commits if name != "cache-commits"] == [4]
        assert len(buffer._pending) == 1
        release.set()
    with GenerationCache(tmp_path / "g.sqlite") as cache:
        assert len(cache) == 9


def test_a_flush_while_the_writer_fails_raises_its_error(tmp_path, monkeypatch):
    """A commit of the writer that fails (a full disk) is the error of a flush made while the
    writer winds down (here: its connection slow to close), never a flush that returns as if
    everything were committed: the Ray driver hands a block's records on once flush returns."""
    import threading
    import time

    from orandcar_builder.executors.generation import CommitBuffer

    tried = threading.Event()
    exit_ = GenerationCache.__exit__

    def full(self, fingerprint, entries):
        if threading.current_thread().name == "cache-commits":
            tried.set()
            raise OSError(28, "No space left on device")
        raise AssertionError("only the writer commits here")

    def slow_exit(self, *exc_info):
        if threading.current_thread().name == "cache-commits":
            time.sleep(0.5)
        return exit_(self, *exc_info)

    monkeypatch.setattr(GenerationCache, "put_many", full)
    monkeypatch.setattr(GenerationCache, "__exit__", slow_exit)
    buffer = CommitBuffer(tmp_path / "g.sqlite", FP, max_entries=2, max_seconds=60)
    try:
        buffer.add_many([(f"k{i}", Generation(str(i), "A", "", "A", "stop", "m")) for i in range(2)])
        assert tried.wait(10) and _wait_for(lambda: not buffer._writer_busy)
        with pytest.raises(CacheError, match="No space left"):
            buffer.flush()
    finally:
        buffer.close()


def test_cache_py_is_storage_only():
    import ast

    import orandcar_builder.cache as cache_module

    tree = ast.parse(Path(cache_module.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any("engines" in name for name in imported)
    assert not hasattr(cache_module, "generate_cached") and not hasattr(cache_module, "CommitBuffer")


# -- the keys asked in a run: an exact set at 32 bytes a key (generation.AskedKeys) -----------------


def test_the_asked_keys_answer_as_a_set_across_their_settling(monkeypatch):
    """Keys moved into the sorted array are found as in the recent set: every byte counts
    (a key ending in NUL bytes, keys one byte apart), and a key never added is never found."""
    monkeypatch.setattr(generation.AskedKeys, "RECENT", 7)
    rng = random.Random(5)
    tricky = [b"\x00" * 32, b"\x01" * 31 + b"\x00", b"\x01" * 32, b"\x01" * 31 + b"\x02", b"\xff" * 32]
    pool = tricky + [rng.randbytes(32) for _ in range(300)]
    keys, reference = generation.AskedKeys(), set()
    for _ in range(60):
        batch = [rng.choice(pool) for _ in range(rng.randrange(1, 12))]
        assert keys.asked_before(batch) == [digest in reference for digest in batch]
        for digest in batch:
            if digest not in reference and rng.random() < 0.5:  # as classify adds: a key not asked before
                keys.add(digest)
                reference.add(digest)
        keys.settle()
        assert len(keys) == len(reference)
    assert len(keys.recent) < 7 and len(keys) > 100  # most of them in the array
    assert keys._sorted.nbytes == 32 * (len(keys) - len(keys.recent))
    with pytest.raises(ValueError):
        keys.add(b"short")


def test_repeated_requests_are_shared_whether_their_key_is_recent_or_settled(cache, monkeypatch):
    requests = [req(f"i{i}", f"question {i % 40}") for i in range(400)]
    counts = []
    for recent in (10**9, 3):
        monkeypatch.setattr(generation.AskedKeys, "RECENT", recent)
        with GenerationCache(Path(cache.path).with_name(f"g{recent}.sqlite")) as fresh:
            engine, stats = Counting(window=7), CacheStats()
            out = run(engine, requests, fresh, stats)
        assert sorted(engine.asked) == sorted(f"question {i}" for i in range(40))
        assert {c.request.item_id: c.generation.final_answer for c in out} == {
            r.item_id: f"A:{r.question}" for r in requests}
        counts.append((stats.total, stats.asked, stats.shared, stats.hits))
    assert counts[0] == counts[1] == (400, 40, 360, 0)
