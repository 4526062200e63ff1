"""The local executor: the generation stage in this process, chunk by chunk."""

from __future__ import annotations

import time
from typing import Callable, Iterator, Optional, Sequence


from ..cache import CacheStats, EngineContractError, GenerationCache, generate_cached
from ..engines import Engine
from ..parquetio import open_parquet
from ..records import Generation, Request
from .base import DecidedChunk, GenerationStage
from .steps import admitted_from_row, decide_rows, make_request


def generate(engine: Engine, requests: Sequence[Request], cache: Optional[GenerationCache], *,
             batch_size: int, stats: CacheStats,
             on_batch: Callable[[CacheStats], None] = lambda stats: None) -> list[Generation]:
    """Generations for ``requests`` in order, from ``cache`` where present (see cache.py), asking
    ``engine`` in batches of ``batch_size``; without a cache every request is asked."""
    if cache is not None:
        return generate_cached(engine, requests, cache, batch_size=batch_size, on_batch=on_batch, stats=stats)
    generations: list[Generation] = []
    for start in range(0, len(requests), batch_size):
        chunk = list(requests[start:start + batch_size])
        out = list(engine.generate(chunk))
        if len(out) != len(chunk) or any(g.item_id != r.item_id for g, r in zip(out, chunk)):
            raise EngineContractError(f"engine {engine.kind} returned generations out of order or incomplete")
        generations.extend(out)
        stats.total += len(chunk)
        stats.asked += len(chunk)
        on_batch(stats)
    return generations


class LocalExecutor:
    """Runs the build's own engine here; an engine error stops the build (the cache keeps what
    was done)."""

    name = "local"

    def run(self, stage: GenerationStage) -> Iterator[DecidedChunk]:
        admitted_file = open_parquet(stage.admitted)
        for batch in admitted_file.iter_batches(batch_size=stage.chunk_size):
            admitted = [admitted_from_row(row) for row in batch.to_pylist()]
            requests = [make_request(a) for a in admitted]
            t0 = time.perf_counter()
            generations = generate(stage.engine, requests, stage.cache, batch_size=stage.batch_size,
                                   stats=stage.stats, on_batch=stage.progress)
            t1 = time.perf_counter()
            rows = decide_rows(admitted, requests, generations)
            stage.add_time("generate", t1 - t0)
            stage.add_time("verify", time.perf_counter() - t1)
            yield DecidedChunk(requests=requests, generations=list(generations), rows=rows)

    def describe(self) -> dict:
        return {"executor": self.name}
