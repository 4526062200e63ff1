"""What an executor is given (``GenerationJob``) and what it yields (``DecidedChunk``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol

import pyarrow as pa

from ..cache import CacheStats, GenerationCache
from ..engines import Engine, create_engine
from ..families import DEFAULT_FAMILIES, Families
from ..records import Generation, Request

# Admitted items handled per chunk: the unit of reading, of decisions.parquet row groups and of
# memory (a chunk's items, requests, generations and decisions).
CHUNK_SIZE = 1024
# Rows per row group of the work files (at most; pipeline.workfiles writes fewer where a group
# passes its byte bound). A reader or writer of a parquet file holds its footer, about 70 kB per
# row group of work/decisions.parquet: with 1024-row groups that grew 67 MB at a million items.
WORK_ROW_GROUP_ROWS = 4096


@dataclass(frozen=True)
class EngineFactory:
    """How to make an engine where it runs (one per Ray actor): a registered engine name and
    its options, which must pickle (paths, numbers, strings)."""

    name: str
    options: dict = field(default_factory=dict)

    def create(self) -> Engine:
        return create_engine(self.name, **self.options)


@dataclass
class GenerationJob:
    """What an executor is given to run: one build's generation stage. Read ``admitted``
    (work/admitted.parquet), generate with ``engine`` (or with engines made by ``factory`` where
    the executor runs them elsewhere), using and filling ``cache``, and decide each item;
    ``stats``, ``timings`` and ``progress`` are how the executor reports back."""

    admitted: Path
    work: Path
    engine: Engine  # the build's own engine: its fingerprint keys the cache
    factory: Optional[EngineFactory]
    cache: Optional[GenerationCache]
    stats: CacheStats
    batch_size: int  # requests per engine call
    chunk_size: int = CHUNK_SIZE
    progress: Callable[[CacheStats], None] = lambda stats: None
    timings: dict[str, float] = field(default_factory=dict)
    # The admitted rows (ADMITTED_SCHEMA, pool order) as they are admitted, when admission overlaps
    # generation (an executor with ``streams_admission``): ``admitted`` is complete only once they
    # are exhausted.
    admitted_rows: Optional[Iterable[dict]] = None
    families: Families = DEFAULT_FAMILIES  # the build's family registry: prompts and rules (workers get it too)
    # Decide on a process of its own (``executors.decider``; the local executor): the generate
    # stage says so for a large pool on two or more CPUs.
    decide_process: bool = False

    def add_time(self, name: str, seconds: float) -> None:
        self.timings[name] = self.timings.get(name, 0.0) + seconds


@dataclass
class DecidedChunk:
    """Admitted items (in the order their generations finished, or were found in the cache): their
    requests, their generations (None where generation failed) and their decision records
    (records.DECISION_SCHEMA), each with its pool ``order``: as dicts in ``rows``, or as one Arrow
    table in ``table`` (``rows`` then empty) where they were decided on another process or waited
    behind batches that were (``executors.decider``)."""

    requests: list[Request]
    generations: list[Optional[Generation]]
    rows: list[dict]
    table: Optional[pa.Table] = None


class ChunkGatherer:
    """Decided records gathered into DecidedChunks of ``size``: ``add`` hands back a full chunk,
    ``take`` what is gathered (None when nothing is)."""

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


class Executor(Protocol):
    """Where the generation stage runs. Registered in ``executors.EXECUTORS``; a build makes it
    with the class's optional ``from_config(config)`` (``build.BuildConfig``), else with no
    arguments (``executors.executor_for``)."""

    name: str

    def run(self, job: GenerationJob) -> Iterator[DecidedChunk]:
        """Every admitted item's decision, once, in DecidedChunks of any order (the build sorts)."""

    def describe(self) -> dict[str, Any]:
        """Settings for the manifest (never part of the dataset)."""


def admitted_rows(job: "GenerationJob") -> Iterator[dict]:
    """The admitted rows in pool order: ``job.admitted_rows`` as they are admitted, else read from
    ``job.admitted`` a chunk at a time."""
    if job.admitted_rows is not None:
        yield from job.admitted_rows
        return
    from ..parquetio import open_parquet

    for batch in open_parquet(job.admitted).iter_batches(batch_size=job.chunk_size):
        yield from batch.to_pylist()
