"""The one way a list of requests is generated in this process: through the generation cache.

The judge pass, its calibration (in a build and in ``orandcar calibrate``) call
``generate_through_cache``; the executors stream the build's own requests with the same cache
(``cache.request_keys`` / ``present`` / ``CommitBuffer`` / ``put_many``), because they decide
each item as its generation finishes and record a failed request on its item instead of
raising."""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..cache import CacheStats, GenerationCache, generate_cached
from ..engines import Engine
from ..engines.base import generate_from_stream, stream_of
from ..records import Generation, Request
from ..vocab import GENERATION_BATCH


def generate_through_cache(engine: Engine, requests: Sequence[Request], cache: Optional[GenerationCache], *,
                           batch_size: int = GENERATION_BATCH, stats: Optional[CacheStats] = None,
                           on_batch: Callable[[CacheStats], None] = lambda stats: None) -> list[Generation]:
    """Generations for ``requests`` in order, from ``cache`` where present (``cache.generate_cached``),
    asking ``engine`` in batches of ``batch_size``; without a cache every request is asked
    (through its stream, so its window stays full). Any failed request raises (the judge's
    semantics). ``stats`` counts hits, asks and stores."""
    stats = stats if stats is not None else CacheStats()
    if cache is not None:
        return generate_cached(engine, requests, cache, batch_size=batch_size, on_batch=on_batch, stats=stats)
    generations = generate_from_stream(lambda rs: stream_of(engine, rs, batch_size=batch_size), requests)
    stats.total += len(requests)
    stats.asked += len(requests)
    on_batch(stats)
    return generations
