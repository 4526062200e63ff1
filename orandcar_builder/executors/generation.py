"""The one way requests are generated in this process: through the generation cache, streaming.

``CachedGeneration.stream(engine, requests)`` is the path the judge pass, ``orandcar calibrate``
and the local executor take (``generate_through_cache`` is its list form, for the judge); the
Ray executor, whose engines run on the cluster, takes its classification and its committer:

- each request's cache key (``cache.request_keys``: the engine's public fingerprint and the
  request) is computed once, when the request is taken;
- a key the cache holds is answered from it at once (a *hit*); a key already asked in this run is
  *shared*: it is answered when (or as soon as) that ask lands, with its generation if it was
  stored, else as failed (``SAME_REQUEST_FAILED``: a rerun asks it again); the keys asked are
  remembered, 32 bytes each (``AskedKeys``), so each distinct request is asked once;
- the rest stream to the engine (``engines.base.stream_of``: the engine holds its own window and
  pulls the next request as one finishes) and each completion is yielded as it lands;
- every complete generation (``cache.is_complete``) goes to one ``CommitBuffer``: small
  transactions, at most COMMIT_ENTRIES each and none waiting longer than COMMIT_SECONDS, so a
  process killed at any moment keeps what was committed. An engine without a stream of its own
  is asked in batches, and what it answered is committed before its next batch is asked.

Nothing of the pool is held: requests are taken in batches (FIRST_TAKE growing to CLASSIFY_BATCH)
as the engine wants them; hits found while the engine still wants requests wait in a queue of at most MAX_READY
(past that the engine's stream is let finish and a new one started after the hits are handed
on). Without a cache every request is asked, and nothing is looked up or stored.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import replace
from itertools import islice
from typing import Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from ..cache import CacheError, CacheStats, GenerationCache, is_complete, request_keys
from ..engines import Engine
from ..engines.base import Completion, EngineContractError, EngineRequestError, public_fingerprint, stream_of
from ..records import Generation, Request
from ..vocab import GENERATION_BATCH
from .steps import SAME_REQUEST_FAILED

# A streaming build commits its finished generations at least this often (count, seconds).
COMMIT_ENTRIES = 64
COMMIT_SECONDS = 0.05
# Full transactions the commit buffer's writer may fall behind before the caller commits one itself.
BACKLOG_TRANSACTIONS = 8
# Requests taken from the caller and looked up in the cache at a time: the first takes are small
# (the caller may still be admitting them: the first request goes out after a few), growing to
# CLASSIFY_BATCH.
FIRST_TAKE = 8
CLASSIFY_BATCH = 64
# Hits queued while the engine's stream still wants requests; past it the stream is let finish.
MAX_READY = 1024
# Seconds between progress callbacks while streaming.
PROGRESS_EVERY_S = 0.5

# How one request is answered:
ASK = 0  # the engine is asked
HIT = 1  # the cache holds the answer already
SHARED = 2  # an earlier request of this run asks the same: its answer, once stored, is this one's


def for_request(generation: Generation, request: Request) -> Generation:
    """A (cached or shared) generation as the answer to ``request``: it carries the request's item id."""
    return generation if generation.item_id == request.item_id else replace(generation, item_id=request.item_id)


class CommitBuffer:
    """Finished generations committed to a cache file in small transactions as they arrive: at
    most ``max_entries`` per transaction, and none waits much longer than ``max_seconds``, so a
    process killed at any moment loses only what was in flight and the last fraction of a second.

    The commits run on a thread of its own (with its own connection): a full transaction's worth
    as soon as it is added, what is left below the count once the oldest entry has waited
    ``max_seconds``, so an entry never waits on the next completion, and the caller does not wait
    for SQLite's writes and the syncs of its write-ahead log's checkpoints (23-32 us of the
    caller's CPU an entry, and more of its wall, when it committed: benchmarks/bench_commits.py).
    Should the writer fall behind (``_writer_behind``: it shares the interpreter lock with a busy
    caller), the caller commits full transactions itself as it adds, so what is uncommitted stays
    bounded in count and in time. ``flush()`` commits what is pending on the caller's connection
    and waits for the writer's transaction; ``get(key)`` sees an entry from the moment it is
    added. ``close()`` commits the rest and raises any error a commit met (a full disk, say);
    ``add`` raises it too once known. ``stats.stored`` and ``stats.batches`` count what was
    committed.
    """

    def __init__(self, path: str | os.PathLike, fingerprint: dict, *, max_entries: int = COMMIT_ENTRIES,
                 max_seconds: float = COMMIT_SECONDS, stats: Optional[CacheStats] = None):
        if max_entries < 1 or max_seconds <= 0:
            raise ValueError("a commit buffer needs max_entries >= 1 and max_seconds > 0")
        self.path, self.fingerprint = str(path), fingerprint
        self._cache: Optional[GenerationCache] = GenerationCache(self.path)  # the caller's; a file that is no cache fails here
        self.max_entries, self.max_seconds = max_entries, max_seconds
        self.stats = stats
        self._pending: dict[str, Generation] = {}  # added, not yet taken by a commit
        self._committing: dict[str, Generation] = {}  # taken by a commit that has not ended
        self._since: Optional[float] = None  # when the oldest pending entry was added
        self._cond = threading.Condition()
        self._closing = False
        self._writer_busy = False
        self._writer_idle = False  # the writer waits for a full transaction or its oldest entry's time
        self._flushing = 0  # flushes waiting for the writer's commit
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="cache-commits", daemon=True)
        self._thread.start()

    def add(self, key: str, generation: Generation) -> None:
        self.add_many([(key, generation)])

    def add_many(self, entries: Sequence[tuple[str, Generation]]) -> None:
        """Queue complete generations under their keys for the writer (committing full
        transactions here while the writer is behind: ``_writer_behind``); an incomplete one is a
        ValueError (none queued)."""
        for _key, generation in entries:
            if not is_complete(generation):
                raise ValueError(f"generation {generation.item_id!r} is incomplete "
                                 f"(finish_reason {generation.finish_reason!r})")
        if not entries:
            return
        with self._cond:
            self._raise_error()
            if self._since is None:
                self._since = time.monotonic()
            self._pending.update(entries)
            if self._writer_idle and len(self._pending) >= self.max_entries:
                self._cond.notify_all()
        while self._writer_behind():
            self._commit_some()

    def _writer_behind(self) -> bool:
        """Whether the caller commits a full transaction itself: one is pending and either the
        oldest pending entry has waited ``max_seconds`` or ``BACKLOG_TRANSACTIONS`` are pending."""
        count = len(self._pending)
        return count >= self.max_entries and (count >= self.max_entries * BACKLOG_TRANSACTIONS
                                              or self._due(self.max_seconds))

    def get(self, key: str) -> Optional[Generation]:
        with self._cond:
            found = self._pending.get(key)
            return found if found is not None else self._committing.get(key)

    def flush(self) -> None:
        """Return once everything added so far is committed (or raise the error a commit met)."""
        while self._pending:
            self._commit_some()
        with self._cond:
            self._flushing += 1
            while self._writer_busy and self._error is None:
                self._cond.wait()
            self._flushing -= 1
            self._raise_error()

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        try:
            if self._cache is not None:
                self.flush()
        finally:
            if self._cache is not None:
                self._cache.close()
                self._cache = None

    def __enter__(self) -> "CommitBuffer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _take(self) -> list[tuple[str, Generation]]:
        """Up to ``max_entries`` pending entries, moved to ``_committing`` (call under the lock)."""
        entries = list(islice(self._pending.items(), self.max_entries))
        for key, generation in entries:
            del self._pending[key]
            self._committing[key] = generation
        self._since = time.monotonic() if self._pending else None
        return entries

    def _done(self, entries: list[tuple[str, Generation]]) -> None:
        """Count a committed transaction (call under the lock)."""
        for key, _ in entries:
            self._committing.pop(key, None)
        if self.stats is not None and entries:
            self.stats.stored += len(entries)
            self.stats.batches += 1
        if self._flushing:  # only a flush waits on a commit (waking the writer for nothing costs)
            self._cond.notify_all()

    def _commit_some(self) -> None:
        """One transaction of pending entries, on the caller's connection."""
        with self._cond:
            self._raise_error()
            entries = self._take()
        if not entries:
            return
        try:
            self._cache.put_many(self.fingerprint, entries)  # type: ignore[union-attr]
        except BaseException as exc:
            with self._cond:
                if isinstance(exc, Exception):  # the cache refused them: they are not kept
                    self._pending.clear()
                else:  # interrupted: they stay for close() to commit
                    self._pending.update(entries)
                for key, _ in entries:  # what the writer is committing stays visible to get()
                    self._committing.pop(key, None)
                self._since = time.monotonic() if self._pending else None
            if not isinstance(exc, Exception) or isinstance(exc, CacheError):
                raise
            raise CacheError(f"{self.path}: cannot store generations ({type(exc).__name__}: {exc})") from exc
        with self._cond:
            self._done(entries)

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, CacheError):
                raise error
            raise CacheError(f"{self.path}: cannot store generations ({type(error).__name__}: {error})") from error

    def _run(self) -> None:
        """The writer: it commits each full transaction's worth as soon as it is there (an add
        that fills one wakes it), and every ``max_seconds / 2`` what has waited half that long
        below the count (so nothing waits longer than ``max_seconds``)."""
        tick = self.max_seconds / 2
        try:
            with GenerationCache(self.path) as cache:
                while True:
                    with self._cond:
                        while not self._closing and len(self._pending) < self.max_entries and not self._due(tick):
                            self._writer_idle = True
                            self._cond.wait(tick)
                            self._writer_idle = False
                        if self._closing:
                            return
                        entries = self._take()
                        self._writer_busy = True
                    try:
                        cache.put_many(self.fingerprint, entries)
                    except BaseException as exc:
                        # the error is set in the same hold of the lock that ends the writer's
                        # work, so a flush() waiting on it raises it, never returns as if committed
                        self._failed(exc)
                        return
                    with self._cond:
                        self._writer_busy = False
                        self._done(entries)
        except BaseException as exc:  # opening or closing the connection
            self._failed(exc)

    def _failed(self, exc: BaseException) -> None:
        """The writer's error, handed to the caller's thread (its next add, flush or close)."""
        with self._cond:
            self._writer_busy = False
            if self._error is None:
                self._error = exc
            self._pending.clear()
            self._committing.clear()
            self._cond.notify_all()

    def _due(self, age: float) -> bool:
        # ``_since`` read once: the caller asks without the lock (``_writer_behind``) while the
        # writer's thread may set it to None between two reads (a TypeError ended a build so).
        since = self._since
        return bool(self._pending) and since is not None and time.monotonic() - since >= age


class AskedKeys:
    """The cache keys (32-byte digests) asked in one run, an exact set at 32 bytes a key.

    A Python set of bytes costs about 110 bytes a key (the bytes object and its slot): 110 MB at a
    million requests. Here the newest keys (at most RECENT) are a set, and the rest one sorted
    numpy array of 32-byte values, searched a batch at a time (``asked_before``); ``settle`` moves
    the set into the array once it is full. Nothing is approximated: every byte of a key counts."""

    RECENT = 1 << 16

    def __init__(self):
        self.recent: set[bytes] = set()
        self._sorted = np.empty(0, dtype="V32")

    def __len__(self) -> int:
        return len(self.recent) + len(self._sorted)

    def asked_before(self, digests: Sequence[bytes]) -> list[bool]:
        """For each digest, whether it was added before this call."""
        if not len(self._sorted):
            return [digest in self.recent for digest in digests]
        wanted = np.frombuffer(b"".join(digests), dtype="V32")
        at = np.minimum(np.searchsorted(self._sorted, wanted), len(self._sorted) - 1)
        in_array = (self._sorted[at] == wanted).tolist()
        return [found or digest in self.recent for found, digest in zip(in_array, digests)]

    def add(self, digest: bytes) -> None:
        """Add a key not added before (``classify`` adds only those)."""
        if len(digest) != 32:
            raise ValueError(f"a cache key is 32 bytes, got {len(digest)}")
        self.recent.add(digest)

    def settle(self) -> None:
        """Move the recent keys into the sorted array once they are RECENT or more."""
        if len(self.recent) < self.RECENT:
            return
        new = np.sort(np.frombuffer(b"".join(self.recent), dtype="V32"))
        self._sorted = np.insert(self._sorted, np.searchsorted(self._sorted, new), new)
        self.recent = set()


class CachedGeneration:
    """One run's requests through ``cache`` for an engine with ``fingerprint`` (see the module
    docstring). Counts go to ``stats``; ``progress(stats)`` is called while streaming, at most
    every PROGRESS_EVERY_S, and at the end. Use as a context manager, or call ``close()``: it
    commits what is left and raises any error the commits met."""

    def __init__(self, cache: Optional[GenerationCache], fingerprint: dict, stats: Optional[CacheStats] = None,
                 progress: Callable[[CacheStats], None] = lambda stats: None):
        self.cache, self.fingerprint = cache, fingerprint
        self.stats = stats if stats is not None else CacheStats()
        self.progress = progress
        self.commits = CommitBuffer(cache.path, fingerprint, stats=self.stats) if cache is not None else None
        self.asked = AskedKeys()  # the keys asked in this run
        self._in_flight: dict[int, tuple[Request, Optional[str]]] = {}  # id(request) -> (request, key)
        self._open: set[str] = set()  # keys asked in this run whose answer has not landed
        self._waiting: dict[str, list[Request]] = {}  # shared requests whose key is open
        self._asks: deque[tuple[Request, Optional[str]]] = deque()  # classified, not yet handed over
        self._ready: deque[Completion] = deque()  # answered, not yet yielded
        self._last_progress = 0.0

    def __enter__(self) -> "CachedGeneration":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self.commits is not None:
            commits, self.commits = self.commits, None
            commits.close()

    # -- what is asked ---------------------------------------------------------------------

    def classify(self, requests: Sequence[Request]) -> tuple[list[Optional[str]], list[int], dict[str, Generation]]:
        """The requests' cache keys (None without a cache), their classes (ASK, HIT, SHARED),
        counted in ``stats`` (``total``, ``hits``, ``shared``), and the stored generation of each
        HIT's key (read in the same query); an ASK's key is remembered."""
        self.stats.total += len(requests)
        if self.cache is None:
            return [None] * len(requests), [ASK] * len(requests), {}
        keys = request_keys(self.fingerprint, requests)
        digests = [bytes.fromhex(key) for key in keys]
        before = self.asked.asked_before(digests)
        found = self.cache.get_many(key for key, asked in zip(keys, before) if not asked)
        classes = []
        recent = self.asked.recent  # the keys this batch adds land here (settled after the batch)
        for key, digest, asked in zip(keys, digests, before):
            if asked or digest in recent:
                classes.append(SHARED)
            elif key in found:
                classes.append(HIT)
            else:
                self.asked.add(digest)
                classes.append(ASK)
        self.asked.settle()
        self.stats.hits += classes.count(HIT)
        self.stats.shared += classes.count(SHARED)
        return keys, classes, found

    def answer(self, key: str) -> Optional[Generation]:
        """The stored generation of ``key``: committed, or waiting to be; None when not stored."""
        found = self.commits.get(key) if self.commits is not None else None
        if found is None and self.cache is not None:
            found = self.cache.get(key)
        return found

    # -- the stream --------------------------------------------------------------------------

    def stream(self, engine: Engine, requests: Iterable[Request], *,
               batch_size: int = GENERATION_BATCH) -> Iterator[Completion]:
        """A Completion for every request, as each lands: hits and requests sharing a stored
        answer carry the generation (with their own item id), asked ones what the engine gave
        (a generation, or the error of a failed request). Each request object is yielded once."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        source = iter(requests)
        state = {"exhausted": False, "fed": False, "take": min(FIRST_TAKE, CLASSIFY_BATCH)}

        def take() -> None:
            batch = list(islice(source, state["take"]))
            state["take"] = min(2 * state["take"], CLASSIFY_BATCH)
            if not batch:
                state["exhausted"] = True
                return
            keys, classes, found = self.classify(batch)
            for request, key, kind in zip(batch, keys, classes):
                if kind == ASK:
                    self._asks.append((request, key))
                    if key is not None:
                        self._open.add(key)
                elif kind == HIT:
                    self._ready.append(Completion(request, for_request(found[key], request)))
                else:
                    self._share(request, key)

        def feed() -> Iterator[Request]:
            while True:
                if self._asks:
                    request, key = self._asks.popleft()
                    self._in_flight[id(request)] = (request, key)
                    yield request
                elif state["exhausted"] or len(self._ready) >= MAX_READY:
                    state["fed"] = True
                    return
                else:
                    take()

        while True:
            while not self._asks and not state["exhausted"]:
                take()
                yield from self._drain()
            if not self._asks:
                break
            state["fed"] = False
            for completion in stream_of(self._committed_first(engine), feed(), batch_size=batch_size):
                yield from self._landed(engine, completion)
                yield from self._drain()
            if self._in_flight:
                raise EngineContractError(f"engine {engine.kind!r} ended its stream with {len(self._in_flight)} "
                                          "request(s) unanswered")
            if not state["fed"]:
                raise EngineContractError(f"engine {engine.kind!r} ended its stream before taking every request")
            yield from self._drain()
        yield from self._drain()
        if self._waiting:  # a bug: every shared request waits on a key in flight
            raise RuntimeError(f"{sum(map(len, self._waiting.values()))} shared request(s) left unanswered")
        if self.commits is not None:
            self.commits.flush()
        self.progress(self.stats)

    def _committed_first(self, engine: Engine) -> Engine:
        """``engine``, or for one without a stream of its own a view whose ``generate`` first
        commits what the previous batches answered (a batch is committed before the next is asked)."""
        if getattr(engine, "stream", None) is not None or self.commits is None:
            return engine
        return _FlushingEngine(engine, self.commits)

    def _share(self, request: Request, key: str) -> None:
        if key in self._open:
            self._waiting.setdefault(key, []).append(request)
            return
        self._ready.append(self._shared_answer(request, self.answer(key)))

    @staticmethod
    def _shared_answer(request: Request, stored: Optional[Generation]) -> Completion:
        if stored is None:
            return Completion(request, error=SAME_REQUEST_FAILED)
        return Completion(request, for_request(stored, request))

    def _landed(self, engine: Engine, completion: Completion) -> Iterator[Completion]:
        entry = self._in_flight.pop(id(completion.request), None)
        if entry is None:
            raise EngineContractError(f"engine {engine.kind!r} answered {completion.request.item_id!r}, "
                                      "which was not asked")
        request, key = entry
        generation = completion.generation
        self.stats.asked += 1
        if generation is not None:
            if generation.item_id != request.item_id:
                raise EngineContractError(f"engine {engine.kind!r} answered {generation.item_id!r} where "
                                          f"{request.item_id!r} was asked: order not kept")
            if not is_complete(generation):
                self.stats.uncached += 1
            elif self.commits is not None:
                self.commits.add(key, generation)
        yield completion
        self._open.discard(key)
        if key is not None and key in self._waiting:
            stored = generation if generation is not None and is_complete(generation) else None
            for shared in self._waiting.pop(key):
                yield self._shared_answer(shared, stored)
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            self.progress(self.stats)

    def _drain(self) -> Iterator[Completion]:
        while self._ready:
            yield self._ready.popleft()


class _FlushingEngine:
    """A batch engine whose every ``generate`` call first waits for the commits before it."""

    def __init__(self, engine: Engine, commits: CommitBuffer):
        self.engine, self.commits = engine, commits
        self.kind = engine.kind

    def generate(self, requests: Sequence[Request]) -> list[Generation]:
        self.commits.flush()
        return self.engine.generate(requests)


def cached_generation(cache: Optional[GenerationCache], engine: Engine, stats: Optional[CacheStats] = None,
                      progress: Callable[[CacheStats], None] = lambda stats: None) -> CachedGeneration:
    """The one cached generation path for ``engine``'s requests (keyed by its public fingerprint).
    Every caller (the judge pass, ``calibrate``, both executors) makes it here."""
    return CachedGeneration(cache, public_fingerprint(engine), stats, progress)


def generate_through_cache(engine: Engine, requests: Sequence[Request], cache: Optional[GenerationCache], *,
                           batch_size: int = GENERATION_BATCH, stats: Optional[CacheStats] = None,
                           on_batch: Callable[[CacheStats], None] = lambda stats: None) -> list[Generation]:
    """``CachedGeneration.stream`` as a list: the generations of ``requests`` in their order, or
    EngineRequestError naming every request that failed (once the others are done and committed:
    the judge's semantics). ``stats`` counts hits, asks and stores; ``on_batch(stats)`` is the
    progress callback."""
    requests = list(requests)
    positions: dict[int, int] = {id(r): i for i, r in enumerate(requests)}
    if len(positions) != len(requests):  # the same object twice: give each position its own
        requests = [replace(r) for r in requests]
        positions = {id(r): i for i, r in enumerate(requests)}
    generations: list[Optional[Generation]] = [None] * len(requests)
    failures: dict[str, str] = {}
    with cached_generation(cache, engine, stats, on_batch) as path:
        for completion in path.stream(engine, requests, batch_size=batch_size):
            if completion.generation is None:
                failures[completion.request.item_id] = completion.error or "failed"
            else:
                generations[positions[id(completion.request)]] = completion.generation
    if failures:
        raise EngineRequestError(failures)
    return generations  # type: ignore[return-value]
