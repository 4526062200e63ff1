"""The local executor: the generation stage in this process, streaming.

Admitted items are taken as they are admitted (``GenerationJob.admitted_rows``: the build's
admission runs inside this stream, so the first requests go out after a few items, not after the
whole pool) or read chunk by chunk from work/admitted.parquet, and turned into requests; those
the cache lacks flow into
the engine's ``stream`` (the engine holds its own window in flight and pulls the next request as
one finishes), and each finished generation is committed to the cache (``CommitBuffer``: small
transactions, bounded by count and time) and decided at once. Decisions come out in completion
order, each with its pool ``order``; the build sorts them on disk (``ordering.sort_by_order``).

Items the cache already answers, and items asking the same request as an earlier one of this
run, are only marked while streaming (one byte each) and decided after the stream, from the cache:
so nothing is held in memory in front of the engine and the first requests go out at once.

A request that fails (the engine's failed Completion) is recorded on its item as ``failed`` and
the build goes on; a rerun asks it again. An engine that cannot run at all (EngineUnavailable,
EngineContractError) stops the build.
"""

from __future__ import annotations

import time
from typing import Iterator, Optional

import numpy as np

from ..cache import CommitBuffer, for_request, is_complete, request_keys
from ..engines.base import public_fingerprint, stream_of
from ..parquetio import open_parquet
from ..records import Admitted, Generation, Request
from .admitted_requests import request_from_row
from .base import DecidedChunk, GenerationJob
from .generation import ASK, HIT, CachedAsks
from .steps import SAME_REQUEST_FAILED, admitted_from_row, decided_or_failed, failed_row, make_request

# Seconds between progress callbacks while streaming.
PROGRESS_EVERY_S = 0.5


class _Out:
    """Decided records gathered into DecidedChunks of ``size``."""

    def __init__(self, size: int):
        self.size = size
        self.requests: list[Request] = []
        self.generations: list[Optional[Generation]] = []
        self.rows: list[dict] = []

    def add(self, request: Request, generation: Optional[Generation], row: dict) -> Optional[DecidedChunk]:
        self.requests.append(request)
        self.generations.append(generation)
        self.rows.append(row)
        return self.take() if len(self.rows) >= self.size else None

    def take(self) -> Optional[DecidedChunk]:
        if not self.rows:
            return None
        chunk = DecidedChunk(requests=self.requests, generations=self.generations, rows=self.rows)
        self.requests, self.generations, self.rows = [], [], []
        return chunk


class LocalExecutor:
    """Runs the build's own engine here, streaming (see the module docstring)."""

    name = "local"

    def run(self, job: GenerationJob) -> Iterator[DecidedChunk]:
        status = bytearray()  # per admitted item in pool order: ASK, HIT or SHARED
        fingerprint = public_fingerprint(job.engine)
        cache = job.cache
        stats = job.stats
        asks = CachedAsks(cache, fingerprint)
        in_flight: dict[int, tuple[Admitted, Request, Optional[str]]] = {}
        commits = CommitBuffer(cache.path, fingerprint, stats=stats) if cache is not None else None
        out = _Out(job.chunk_size)
        timer = {"verify": 0.0}

        fed = []

        def feed() -> Iterator[Request]:
            for rows in _row_batches(job):
                requests = [request_from_row(row) for row in rows]  # the Admitted item for the asked only
                keys, classes = asks.classify(requests)
                status.extend(classes)
                for row, request, key, kind in zip(rows, requests, keys, classes):
                    if kind == ASK:
                        in_flight[id(request)] = (admitted_from_row(row), request, key)
                        stats.total += 1
                        yield request
            fed.append(True)

        t0 = time.perf_counter()
        last_progress = 0.0
        try:
            for completion in stream_of(job.engine, feed(), batch_size=job.batch_size):
                a, request, key = in_flight.pop(id(completion.request))
                generation = completion.generation
                stats.asked += 1
                t1 = time.perf_counter()
                if generation is None:
                    row = failed_row(a, request, completion.error or "the engine gave no answer")
                else:
                    generation = for_request(generation, request)
                    if not is_complete(generation):
                        stats.uncached += 1
                    elif commits is not None:
                        commits.add(key, generation)
                    row = decided_or_failed(a, request, generation)
                t2 = time.perf_counter()
                timer["verify"] += t2 - t1
                chunk = out.add(request, generation, row)
                if chunk is not None:
                    yield chunk
                if t2 - last_progress >= PROGRESS_EVERY_S:
                    last_progress = t2
                    job.progress(stats)
        finally:
            if commits is not None:
                commits.close()
        job.add_time("generate", time.perf_counter() - t0 - timer["verify"])
        job.add_time("verify", timer["verify"])
        if in_flight:
            raise RuntimeError(f"engine {job.engine.kind!r} ended its stream with {len(in_flight)} request(s) unanswered")
        if not fed:
            raise RuntimeError(f"engine {job.engine.kind!r} ended its stream before taking every request")
        chunk = out.take()
        if chunk is not None:
            yield chunk
        job.progress(stats)
        classes = np.frombuffer(bytes(status), dtype=np.int8)
        if cache is not None and np.any(classes != ASK):
            yield from self._from_cache(job, asks, classes)

    def _from_cache(self, job: GenerationJob, asks: CachedAsks, status: np.ndarray) -> Iterator[DecidedChunk]:
        """The items answered by the cache (``HIT``) or by an earlier ask of this run
        (``SHARED``), decided in chunks."""
        t0 = time.perf_counter()
        position = 0
        for batch in open_parquet(job.admitted).iter_batches(batch_size=job.chunk_size):
            classes = status[position:position + batch.num_rows]
            position += batch.num_rows
            wanted = np.flatnonzero(classes != ASK)
            if len(wanted) == 0:
                continue
            rows = batch.take(wanted).to_pylist()
            admitted = [admitted_from_row(row) for row in rows]
            requests = [make_request(a) for a in admitted]
            keys = request_keys(asks.fingerprint, requests)
            found = asks.answers(keys)
            out = _Out(len(rows) + 1)  # one chunk per batch, taken below
            for a, request, key, kind in zip(admitted, requests, keys, classes[wanted]):
                job.stats.total += 1
                if kind == HIT:
                    job.stats.hits += 1
                else:
                    job.stats.shared += 1
                generation = found.get(key)
                if generation is None:
                    out.add(request, None, failed_row(a, request, SAME_REQUEST_FAILED))
                    continue
                generation = for_request(generation, request)
                out.add(request, generation, decided_or_failed(a, request, generation))
            job.progress(job.stats)
            yield out.take()
        job.add_time("verify", time.perf_counter() - t0)

    def describe(self) -> dict:
        return {"executor": self.name}


# Rows per batch taken from admission while it overlaps generation: the first batches are small,
# so the first requests go out after a few items are admitted, not after a chunk, and none is
# large, so the engine's loop never waits long for a batch to be admitted.
FIRST_STREAM_BATCH = 8
MAX_STREAM_BATCH = 64


def _row_batches(job: GenerationJob) -> Iterator[list[dict]]:
    """The admitted rows in pool order, in batches: from ``job.admitted_rows`` as they are
    admitted (batches growing from FIRST_STREAM_BATCH to MAX_STREAM_BATCH), else read from
    ``job.admitted`` a chunk at a time."""
    if job.admitted_rows is None:
        for batch in open_parquet(job.admitted).iter_batches(batch_size=job.chunk_size):
            yield batch.to_pylist()
        return
    largest = min(MAX_STREAM_BATCH, job.chunk_size)
    size = min(FIRST_STREAM_BATCH, largest)
    batch: list[dict] = []
    for row in job.admitted_rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
            size = min(size * 2, largest)
    if batch:
        yield batch
