"""The Ray executor: generation and verification on a Ray cluster, with Ray Data.

The driver (this process) keeps the generation cache; the cluster only generates and decides:

1. The driver reads work/admitted.parquet in chunks, looks each request up in the cache and writes
   the items to ask (not cached, and not asked earlier in this run under the same key) to
   ``work/ray/asks-*.parquet``.
2. The driver puts those items in the object store in chunks; they become a Ray Dataset; ``map_batches`` runs ``GenerateAndDecide`` on a pool of
   ``replicas`` actors, each holding one engine made by the EngineFactory (a vLLM model loads
   once per replica) and deciding each item next to its generation. Each actor runs
   ``batches_per_replica`` batches at once (threads sharing its engine: each batch streams
   through it), so its engine is fed the next batches while one batch's slowest reply runs. A
   request that fails is recorded as ``failed`` with the error, and the job goes on. An actor that dies is restarted by Ray and its batch retried (Ray Data's
   defaults: without limit; ``max_restarts`` / ``max_task_retries`` bound them).
3. The driver reads the results in order (``preserve_order``), commits each received batch of
   generations to the cache through the committer of the one cached path
   (``generation.CachedGeneration``: the same keys, classes and commits as the local
   executor's), waiting for the commit before it hands the batch on, and merges them with the
   cached items into the same pool-order DecidedChunk stream as the local executor.

Why the driver owns the cache: SQLite allows one writer at a time and its write-ahead log needs
shared memory on one host, so actors on other nodes writing a cache file on network storage would
not be safe. With one writer, what a killed build loses is only the batches it had not received
yet; the rerun finds everything received in the cache and sends Ray only the rest.

Paths: actors open the pool's images by the driver's paths, so on a multi-node cluster the images
must be on storage every node mounts at the same path (a local cluster needs nothing); the work
dir stays with the driver. Ray is imported only here.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..cache import engine_hash, generation_from_json, generation_to_json, is_complete, request_keys
from ..engines.base import EngineUnavailable, public_fingerprint, stream_of
from ..errors import OrandCarError
from ..families import Families
from ..images import ImageRef
from ..parquetio import open_parquet
from ..records import ADMITTED_SCHEMA, DECISION_SCHEMA, Generation, Request, admitted_from_row
from ..workdir import WorkDir
from .base import DecidedChunk, GenerationJob
from .generation import ASK, HIT, CachedGeneration, cached_generation, for_request
from .steps import SAME_REQUEST_FAILED, decided_or_failed, failed_row, make_request

RAY_MISSING = ("the ray executor needs Ray Data: pip install 'orandcar-builder[ray]' "
               "(it installs ray[data])")
ASKS_PER_FILE = 4096
# Batches each actor runs at the same time on its one engine.
BATCHES_PER_REPLICA = 4
# Engine batches per block handed to Ray Data, at most: a task per engine batch of 32 cost Ray
# Data's scheduling hundreds of times on 20k items (benchmarks/bench_ray.py); a block of several
# batches is one task that calls the actor once per batch. Blocks are made smaller where there are
# few asks, so that every batch slot of every replica still gets blocks (BLOCKS_PER_SLOT each).
BLOCK_BATCHES = 32
BLOCKS_PER_SLOT = 2
GENERATION_COLUMN = "generation"  # JSON of the generation made by the actor (null where it failed)


class ExecutorError(OrandCarError):
    """The Ray executor cannot run or got results it cannot use; the message says why."""


def import_ray():
    """``ray`` with Ray Data, or EngineUnavailable saying how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise EngineUnavailable(f"{RAY_MISSING} ({exc})") from None
    return ray


class GenerateAndDecide:
    """The Ray Data actor: one engine per actor; ``__call__`` takes a batch of admitted rows and
    returns their decision records plus the generations (as JSON) for the driver's cache."""

    def __init__(self, factory, expected_engine: str, families: Families):
        self.families = families  # the build's registry, shipped as a value: the driver's prompts and rules
        self.engine = factory.create()
        fingerprint = public_fingerprint(self.engine)
        if engine_hash(fingerprint) != expected_engine:
            raise ExecutorError(
                f"the engine made on this Ray worker has another fingerprint than the driver's "
                f"({fingerprint}); install the same engine versions and models on every node")

    def __call__(self, batch: pa.Table) -> pa.Table:
        admitted = [admitted_from_row(row) for row in batch.to_pylist()]
        requests = [make_request(a, self.families) for a in admitted]
        generations, errors = self._generate(requests)
        rows, blobs = [], []
        for a, request, generation, error in zip(admitted, requests, generations, errors):
            if generation is None:
                rows.append(failed_row(a, request, error))
                blobs.append(None)
                continue
            rows.append(decided_or_failed(a, request, generation, self.families))  # a rule that raises fails only its item
            blobs.append(generation_to_json(generation))
        table = pa.Table.from_pylist(rows, schema=DECISION_SCHEMA)
        return table.append_column(GENERATION_COLUMN, pa.array(blobs, pa.string()))

    def _generate(self, requests: list[Request]) -> tuple[list[Optional[Generation]], list[Optional[str]]]:
        """The batch through the engine's stream (its window slides within the batch; the other
        batches this actor runs at the same time share the engine): one generation or one error
        per request, in the batch's order. A request that fails fails only itself."""
        position = {id(r): i for i, r in enumerate(requests)}
        generations: list[Optional[Generation]] = [None] * len(requests)
        errors: list[Optional[str]] = ["the engine gave no answer"] * len(requests)
        for completion in stream_of(self.engine, requests):
            i = position.pop(id(completion.request), None)
            if i is None:
                raise ExecutorError(f"engine {self.engine.kind!r} answered {completion.request.item_id!r}, "
                                    "which was not asked")
            if completion.generation is not None and completion.generation.item_id != completion.request.item_id:
                raise ExecutorError(f"engine {self.engine.kind!r} answered {completion.generation.item_id!r} "
                                    f"where {completion.request.item_id!r} was asked")
            generations[i], errors[i] = completion.generation, completion.error if completion.generation is None else None
        return generations, errors


class _Peekable:
    def __init__(self, iterator: Iterator[dict]):
        self.iterator = iterator
        self.head: Optional[dict] = None
        self.done = False

    def next(self) -> Optional[dict]:
        if self.head is None and not self.done:
            self.head = next(self.iterator, None)
            self.done = self.head is None
        head, self.head = self.head, None
        return head


class RayExecutor:
    """Generation on Ray Data: ``replicas`` actors with ``gpus_per_replica`` GPUs (and
    ``cpus_per_replica`` CPUs) each, on the cluster at ``address`` (``None``: the running one, or
    a new local cluster)."""

    name = "ray"

    def __init__(self, address: Optional[str] = None, replicas: int = 1, gpus_per_replica: float = 0.0,
                 cpus_per_replica: float = 1.0, max_restarts: Optional[int] = None,
                 max_task_retries: Optional[int] = None, show_progress: bool = False,
                 batches_per_replica: int = BATCHES_PER_REPLICA):
        if batches_per_replica < 1:
            raise ExecutorError(f"batches per replica must be at least 1, got {batches_per_replica}")
        if replicas < 1:
            raise ExecutorError(f"engine replicas must be at least 1, got {replicas}")
        if gpus_per_replica < 0 or cpus_per_replica < 0:
            raise ExecutorError("GPUs and CPUs per replica cannot be negative")
        self.ray = import_ray()
        self.address = address
        self.replicas = replicas
        self.gpus_per_replica = gpus_per_replica
        self.cpus_per_replica = cpus_per_replica
        self.max_restarts = max_restarts
        self.max_task_retries = max_task_retries
        self.show_progress = show_progress
        self.batches_per_replica = batches_per_replica

    @classmethod
    def from_config(cls, config) -> "RayExecutor":
        """The executor a build's settings ask for (``build.BuildConfig``: ray address, replicas,
        GPUs per replica)."""
        return cls(address=config.ray_address, replicas=config.engine_replicas,
                   gpus_per_replica=config.gpus_per_replica)

    def describe(self) -> dict:
        return {"executor": self.name, "address": self.address, "replicas": self.replicas,
                "gpus_per_replica": self.gpus_per_replica, "cpus_per_replica": self.cpus_per_replica,
                "max_restarts": self.max_restarts, "max_task_retries": self.max_task_retries,
                "batches_per_replica": self.batches_per_replica,
                "ray": self.ray.__version__}

    # -- driver ----------------------------------------------------------------------------

    def run(self, job: GenerationJob) -> Iterator[DecidedChunk]:
        if job.factory is None:
            raise ExecutorError("the ray executor makes one engine per replica: it needs an engine "
                                "name and options (an EngineFactory), not only an engine object")
        asks_dir = WorkDir(job.work).ray_dir
        shutil.rmtree(asks_dir, ignore_errors=True)
        asks_dir.mkdir(parents=True)
        t0 = time.perf_counter()
        started = False
        with cached_generation(job.cache, job.engine, job.stats, job.progress) as cached:
            status, files = self._write_asks(job, cached, asks_dir)
            try:
                if files:
                    started = self._connect()
                    results = _Peekable(self._results(job, cached, files))
                else:
                    results = _Peekable(iter(()))
                yield from self._merge(job, cached, status, results)
                if results.next() is not None:
                    raise ExecutorError("Ray returned more results than items were asked")
            finally:
                job.add_time("generate", time.perf_counter() - t0)
                if started:
                    self.ray.shutdown()
        shutil.rmtree(asks_dir, ignore_errors=True)

    def _write_asks(self, job: GenerationJob, asks: CachedGeneration, asks_dir: Path) -> tuple[np.ndarray, list[Path]]:
        """Classify every admitted item (cached, to ask, or sharing an earlier ask's key) and
        write the ones to ask; returns the classes (one byte per item) and the files."""
        admitted_file = open_parquet(job.admitted)
        status = np.empty(admitted_file.metadata.num_rows, dtype=np.int8)
        files: list[Path] = []
        pending: list[dict] = []
        writer, in_file, position = None, 0, 0

        def flush() -> None:
            nonlocal writer, in_file
            while pending:
                if writer is None:
                    files.append(WorkDir(job.work).ray_asks(len(files)))
                    writer = pq.ParquetWriter(files[-1], ADMITTED_SCHEMA)
                take = min(len(pending), ASKS_PER_FILE - in_file)
                writer.write_table(pa.Table.from_pylist(pending[:take], schema=ADMITTED_SCHEMA))
                del pending[:take]
                in_file += take
                if in_file >= ASKS_PER_FILE:
                    writer.close()
                    writer, in_file = None, 0

        try:
            for batch in admitted_file.iter_batches(batch_size=job.chunk_size):
                rows = batch.to_pylist()
                _, classes = asks.classify([make_request(admitted_from_row(row), job.families) for row in rows])
                status[position:position + len(rows)] = classes
                position += len(rows)
                pending.extend(row for row, kind in zip(rows, classes) if kind == ASK)
                flush()
        finally:
            if writer is not None:
                writer.close()
        return status, files

    def _connect(self) -> bool:
        """Join the cluster (or start a local one); True when this call started Ray."""
        ray = self.ray
        if ray.is_initialized():
            return False
        ray.init(address=self.address, include_dashboard=False, log_to_driver=self.show_progress,
                 configure_logging=self.show_progress)
        return True

    def _results(self, job: GenerationJob, cached: CachedGeneration, files: list[Path]) -> Iterator[dict]:
        """The actors' records in ask order; each received batch of generations is committed to
        the cache (through the path's committer) before its records are handed on."""
        fingerprint = cached.fingerprint
        import ray.data

        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = self.show_progress
        # The driver hands the items over through the object store (no read tasks competing with
        # the actors for CPUs, and the work dir need not be on shared storage).
        # Blocks of several engine batches (block_rows), as many as keep every replica busy.
        asks = sum(open_parquet(path).metadata.num_rows for path in files)
        rows = block_rows(asks, job.batch_size, self.replicas * self.batches_per_replica)
        refs = []
        for path in files:
            for batch in open_parquet(path).iter_batches(batch_size=rows):
                refs.append(self.ray.put(pa.Table.from_batches([batch])))
        dataset = ray.data.from_arrow_refs(refs)
        options: dict[str, Any] = dict(
            fn_constructor_kwargs={"factory": job.factory, "expected_engine": engine_hash(fingerprint),
                                   "families": job.families},
            batch_size=job.batch_size, batch_format="pyarrow",
            # Several batches run at once on each actor (threads sharing its engine), so the engine
            # is handed the next batch's requests while the slowest of one batch still runs.
            compute=ray.data.ActorPoolStrategy(size=self.replicas,
                                               max_tasks_in_flight_per_actor=self.batches_per_replica,
                                               max_concurrent_calls_per_actor=self.batches_per_replica,
                                               enable_true_multi_threading=self.batches_per_replica > 1),
            num_cpus=self.cpus_per_replica,
        )
        if self.gpus_per_replica:
            options["num_gpus"] = self.gpus_per_replica
        # Ray Data already restarts lost actors and retries their batches without limit; bounds
        # are passed only when asked for.
        if self.max_restarts is not None:
            options["max_restarts"] = self.max_restarts
        if self.max_task_retries is not None:
            options["max_task_retries"] = self.max_task_retries
        decided = dataset.map_batches(GenerateAndDecide, **options)
        try:
            yield from self._commit(job, cached, decided.iter_batches(batch_format="pyarrow", batch_size=None))
        except OrandCarError:
            raise
        except Exception as exc:  # Ray's own errors wrap ours; show the cause, keep the chain
            raise ExecutorError(f"the Ray job failed: {_cause(exc)}") from exc

    @staticmethod
    def _commit(job: GenerationJob, cached: CachedGeneration, tables) -> Iterator[dict]:
        """The rows of each received table, its complete generations committed first."""
        for table in tables:
            rows = table.to_pylist()
            complete = []
            for row in rows:
                blob = row.pop(GENERATION_COLUMN)
                row["_generation"] = generation_from_json(blob) if blob is not None else None
                if row["_generation"] is not None and is_complete(row["_generation"]):
                    complete.append(row)
            requests = [Request(item_id=row["id"], question=row["question"], family=row["family"],
                                image=_image_of(row)) for row in complete]
            entries = list(zip(request_keys(cached.fingerprint, requests), (row["_generation"] for row in complete)))
            job.stats.asked += len(rows)
            job.stats.uncached += sum(1 for r in rows if r["_generation"] is not None) - len(entries)
            if entries and cached.commits is not None:
                cached.commits.add_many(entries)
                cached.commits.flush()  # committed before its rows are handed on
            yield from rows

    def _merge(self, job: GenerationJob, asks: CachedGeneration, status: np.ndarray,
               results: _Peekable) -> Iterator[DecidedChunk]:
        admitted_file = open_parquet(job.admitted)
        position = 0
        for batch in admitted_file.iter_batches(batch_size=job.chunk_size):
            admitted = [admitted_from_row(row) for row in batch.to_pylist()]
            requests = [make_request(a, job.families) for a in admitted]
            keys = request_keys(asks.fingerprint, requests)
            classes = status[position:position + len(admitted)]
            position += len(admitted)
            hits = asks.answers([k for k, c in zip(keys, classes) if c == HIT])
            generations: list[Optional[Generation]] = []
            rows: list[dict] = []
            for a, request, key, kind in zip(admitted, requests, keys, classes):
                if kind == ASK:
                    row = results.next()
                    if row is None or row["id"] != request.item_id:
                        raise ExecutorError(f"Ray returned {row and row['id']!r} where {request.item_id!r} "
                                            "was expected: results out of order")
                    generation = row.pop("_generation")
                    generations.append(generation)
                    rows.append(row)
                    continue
                if kind == HIT:
                    generation = hits.get(key)
                else:  # the same request as an earlier item: committed when that one came back
                    generation = asks.answer(key)
                if generation is None:
                    generations.append(None)
                    rows.append(failed_row(a, request, SAME_REQUEST_FAILED))
                    continue
                generation = for_request(generation, request)
                generations.append(generation)
                rows.append(decided_or_failed(a, request, generation, job.families))
            job.progress(job.stats)
            yield DecidedChunk(requests=requests, generations=generations, rows=rows)


def block_rows(asks: int, batch_size: int, slots: int) -> int:
    """Rows per block for ``asks`` items: a whole number of engine batches (``batch_size``), at
    most BLOCK_BATCHES of them, and few enough that ``slots`` batch slots (replicas times batches
    per replica) get BLOCKS_PER_SLOT blocks each."""
    batches = -(-asks // batch_size)
    per_block = batches // max(1, slots * BLOCKS_PER_SLOT)
    return batch_size * max(1, min(BLOCK_BATCHES, per_block))


def _cause(exc: BaseException) -> str:
    """The most specific message in a Ray error: our own error's text where it carries one."""
    text = str(exc)
    marker = f"{ExecutorError.__name__}: "
    if marker in text:
        return text.split(marker, 1)[1].splitlines()[0]
    return text.splitlines()[0] if text else type(exc).__name__


def _image_of(row: dict) -> ImageRef:
    return ImageRef(path=row["image"], sha256=row["image_sha256"])
