"""The one way a list of requests is generated in this process: through the generation cache.

The judge pass and its calibration (in a build and in ``orandcar calibrate``) call
``generate_through_cache``. The executors stream the build's own requests instead (they decide
each item as its generation finishes and record a failed request on its item rather than
raise), and share ``CachedAsks`` for what they ask and what the cache answers."""

from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

from ..cache import CacheStats, GenerationCache, generate_cached, request_keys
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


# How one admitted item is answered (one byte per item, in pool order, while a run streams):
ASK = 0  # the engine is asked
HIT = 1  # the cache holds the answer already
SHARED = 2  # an earlier item of this run asks the same request: its answer, once cached, is this one's


class CachedAsks:
    """The executors' side of the cache: which of a run's requests the engine must be asked.

    ``classify`` looks a batch of requests up by key (``cache.request_key``: the engine's
    fingerprint and the request) and gives each HIT, SHARED or ASK; the keys asked so far are
    remembered (32 bytes each) so that a later item asking the same request is SHARED, asked
    once. ``answers`` reads what the cache holds for the items not asked. Without a cache every
    item is ASK. The generations the engine gives are committed by the executor as they arrive
    (``cache.CommitBuffer`` here, one ``put_many`` per received batch on Ray)."""

    def __init__(self, cache: Optional[GenerationCache], fingerprint: dict):
        self.cache, self.fingerprint = cache, fingerprint
        self.asked: set[bytes] = set()

    def classify(self, requests: Sequence[Request]) -> tuple[list[Optional[str]], list[int]]:
        """The requests' cache keys (None without a cache) and their classes."""
        if self.cache is None:
            return [None] * len(requests), [ASK] * len(requests)
        keys = request_keys(self.fingerprint, requests)
        present = self.cache.present(keys)
        classes = []
        for key in keys:
            if key in present:
                classes.append(HIT)
                continue
            digest = bytes.fromhex(key)
            if digest in self.asked:
                classes.append(SHARED)
            else:
                self.asked.add(digest)
                classes.append(ASK)
        return keys, classes

    def answers(self, keys: Iterable[str]) -> dict[str, Generation]:
        """The cached generations of ``keys`` (a key whose ask failed is missing)."""
        return self.cache.get_many(keys) if self.cache is not None else {}

