"""The local executor: the generation stage in this process, streaming.

Admitted items are taken as they are admitted (``GenerationJob.admitted_rows``: the build's
admission runs inside this stream, so the first requests go out after a few items, not after the
whole pool) or read chunk by chunk from work/admitted.parquet, and turned into requests, which go
through the one cached generation path (``generation.CachedGeneration.stream``: the cache answers
what it holds, the rest streams to the engine, finished generations are committed in small
transactions). Answered items are decided a batch at a time, in the order their answers landed:
here, or for a large pool on a process of its own (``GenerationJob.decide_process``:
``executors.decider``, whose records come back as Arrow tables); each decision carries its pool
``order`` and the build sorts them on disk (``ordering.sort_by_order``). An item is held only
from the moment its request is taken until its batch is decided.

A request that fails (the engine's failed Completion) is recorded on its item as ``failed`` and
the build goes on; a rerun asks it again. An engine that cannot run at all (EngineUnavailable,
EngineContractError) stops the build.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Iterator, Optional

from ..records import Generation, Request
from .base import DecidedChunk, GenerationJob, admitted_rows
from .decider import DECIDE_BATCH, Decider
from .generation import cached_generation
from .steps import decided_rows, request_of_row


class LocalExecutor:
    """Runs the build's own engine here, streaming (see the module docstring)."""

    name = "local"
    streams_admission = True  # takes GenerationJob.admitted_rows as they are admitted

    def run(self, job: GenerationJob) -> Iterator[DecidedChunk]:
        admitted: dict[int, dict] = {}  # id(request) -> its admitted row, from taken until answered
        answered: list[tuple[dict, Request, Optional[Generation], Optional[str]]] = []
        # Answered items are decided a batch at a time: on the decider's process, or here.
        batch = DECIDE_BATCH if job.decide_process else job.chunk_size
        timer = {"verify": 0.0}

        def requests() -> Iterator[Request]:  # the cached path takes them as the engine wants them
            for row in admitted_rows(job):
                request = request_of_row(row, job.families)
                admitted[id(request)] = row
                yield request

        def decide_here(items: list) -> DecidedChunk:
            t1 = time.perf_counter()
            rows = decided_rows([(row, request.question, generation, error)
                                 for row, request, generation, error in items], job.families)
            timer["verify"] += time.perf_counter() - t1
            return DecidedChunk(requests=[i[1] for i in items], generations=[i[2] for i in items], rows=rows)

        t0 = time.perf_counter()
        with (Decider(job.families) if job.decide_process else nullcontext()) as decider:
            with cached_generation(job.cache, job.engine, job.stats, job.progress) as path:
                for completion in path.stream(job.engine, requests(), batch_size=job.batch_size):
                    request = completion.request
                    answered.append((admitted.pop(id(request)), request, completion.generation, completion.error))
                    if len(answered) >= batch:
                        items, answered = answered, []
                        if decider is not None:
                            yield from decider.submit(items, decide_here)
                        else:
                            yield decide_here(items)
            if answered:
                yield from decider.submit(answered, decide_here) if decider is not None else [decide_here(answered)]
            if decider is not None:
                yield from decider.finish()
        # On the decider, "verify" is its process's seconds (beside generating) and this process's
        # own deciding; "generate" is this process's time less its deciding and its waits.
        waited = timer["verify"] + (decider.waited if decider is not None else 0.0)
        job.add_time("generate", time.perf_counter() - t0 - waited)
        job.add_time("verify", timer["verify"] + (decider.seconds if decider is not None else 0.0))

    def describe(self) -> dict:
        return {"executor": self.name}
