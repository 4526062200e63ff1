"""The local executor: the generation stage in this process, streaming.

Admitted items are taken as they are admitted (``GenerationJob.admitted_rows``: the build's
admission runs inside this stream, so the first requests go out after a few items, not after the
whole pool) or read chunk by chunk from work/admitted.parquet, and turned into requests, which go
through the one cached generation path (``generation.CachedGeneration.stream``: the cache answers
what it holds, the rest streams to the engine, finished generations are committed in small
transactions). Each item is decided as its answer lands; decisions come out in that order, each
with its pool ``order``; the build sorts them on disk (``ordering.sort_by_order``). An item is
held only from the moment its request is taken until its answer lands.

A request that fails (the engine's failed Completion) is recorded on its item as ``failed`` and
the build goes on; a rerun asks it again. An engine that cannot run at all (EngineUnavailable,
EngineContractError) stops the build.
"""

from __future__ import annotations

import time
from typing import Iterator

from ..records import Admitted, Request, admitted_from_row
from .base import ChunkGatherer, DecidedChunk, GenerationJob, admitted_rows
from .generation import cached_generation
from .steps import decided_or_failed, failed_row, make_request


class LocalExecutor:
    """Runs the build's own engine here, streaming (see the module docstring)."""

    name = "local"
    streams_admission = True  # takes GenerationJob.admitted_rows as they are admitted

    def run(self, job: GenerationJob) -> Iterator[DecidedChunk]:
        admitted: dict[int, Admitted] = {}  # id(request) -> its item, from taken until answered
        out = ChunkGatherer(job.chunk_size)
        timer = {"verify": 0.0}

        def requests() -> Iterator[Request]:  # the cached path takes them as the engine wants them
            for row in admitted_rows(job):
                a = admitted_from_row(row)
                request = make_request(a, job.families)
                admitted[id(request)] = a
                yield request

        t0 = time.perf_counter()
        with cached_generation(job.cache, job.engine, job.stats, job.progress) as path:
            for completion in path.stream(job.engine, requests(), batch_size=job.batch_size):
                t1 = time.perf_counter()
                request, generation = completion.request, completion.generation
                a = admitted.pop(id(request))
                if generation is None:
                    row = failed_row(a, request, completion.error or "the engine gave no answer")
                else:
                    row = decided_or_failed(a, request, generation, job.families)
                timer["verify"] += time.perf_counter() - t1
                chunk = out.add(request, generation, row)
                if chunk is not None:
                    yield chunk
        job.add_time("generate", time.perf_counter() - t0 - timer["verify"])
        job.add_time("verify", timer["verify"])
        chunk = out.take()
        if chunk is not None:
            yield chunk

    def describe(self) -> dict:
        return {"executor": self.name}

