"""The Ray executor: generation and verification on a Ray cluster, one engine per Ray actor.

The driver (this process) keeps the generation cache; the cluster only generates and decides:

1. The driver takes the admitted rows as they are admitted (``GenerationJob.admitted_rows``: the
   build's admission runs inside this stream, as on the local executor), or reads
   work/admitted.parquet when the last admission is reused, and looks each request up in the
   cache (``generation.CachedGeneration.classify``: the one cached path's keys and classes).
   Cached items are decided at once; items sharing the key of an earlier ask when that ask comes
   back; the items to ask wait, as Arrow rows (at most HELD_ASKS), for the next block.
2. Ray starts (``ray.init``, or joins the cluster) on a thread of its own at the first item to
   ask, so admission goes on meanwhile; a build whose every request is cached never starts it.
   Then ``replicas`` actors (``GenerateAndDecide``) each make one engine from the EngineFactory
   (a vLLM model loads once per replica) and decide each item next to its generation, or, for
   the blocks the driver takes (``_DriverShare``: while the driver would otherwise wait for the
   actors), only generate it and leave the deciding to the driver. The asks go
   to them in blocks (``block_sizes``: one engine batch per batch slot first, growing to
   BLOCK_BATCHES batches), each actor holding at most BLOCKS_AHEAD blocks per batch it runs at
   once (``batches_per_replica``: threads sharing its engine, so that it is fed the next batch
   while one batch's slowest reply runs). A request that fails is recorded as ``failed`` with
   the error, and the job goes on. An actor that dies is restarted by Ray and its blocks run
   again (without limit unless ``max_restarts`` / ``max_task_retries`` bound them).
3. The driver takes each block's records as it is done (any order: the build sorts the decisions
   by pool order), deciding those of the blocks it took with the same code, commits its complete
   generations to the cache through the path's committer, waiting for the commit before it hands
   the records on, between admitting the next rows. Where a block is decided changes no record.

Why the driver owns the cache: SQLite allows one writer at a time and its write-ahead log needs
shared memory on one host, so actors on other nodes writing a cache file on network storage would
not be safe. With one writer, what a killed build loses is only the batches it had not received
yet; the rerun finds everything received in the cache and sends Ray only the rest.

Paths: actors open the pool's images by the driver's paths, so on a multi-node cluster the images
must be on storage every node mounts at the same path (a local cluster needs nothing); the work
dir stays with the driver. Ray is imported only here. (Ray Data's ``map_batches`` ran this until
issue 27: its read side cannot take blocks that do not exist yet, and its helper actors cost
0.6 GB and seconds of start-up on one machine; Ray's own actors do what it did here.)
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import logging
import math
import re
import shutil
import threading
import time
from itertools import islice
from typing import Any, Iterator, Optional

import pyarrow as pa

from ..cache import engine_hash, generation_from_json, generation_to_json, is_complete, request_keys
from ..engines.base import EngineUnavailable, public_fingerprint, stream_of
from ..errors import OrandCarError
from ..families import Families
from ..images import ImageRef
from ..records import ADMITTED_SCHEMA, DECISION_SCHEMA, Generation, Request
from ..workdir import WorkDir
from .base import ChunkGatherer, DecidedChunk, GenerationJob, admitted_rows
from .generation import ASK, HIT, SHARED, CachedGeneration, cached_generation, for_request
from .steps import SAME_REQUEST_FAILED, decided_rows, request_of_row

RAY_MISSING = "the ray executor needs Ray: pip install 'orandcar-builder[ray]' (it installs ray[data])"
# Batches each actor runs at the same time on its one engine.
BATCHES_PER_REPLICA = 4
# Engine batches per block handed to an actor, at most: a task per engine batch of 32 cost Ray's
# scheduling hundreds of times on 20k items (benchmarks/bench_ray.py); a block of several
# batches is one call that runs the actor's engine once per batch. The first blocks are smaller
# (``block_sizes``), so that the first asks go out early and every batch slot gets blocks.
BLOCK_BATCHES = 32
# Blocks given to an actor at a time, per batch it runs at once.
BLOCKS_AHEAD = 2
# Asks the driver holds, at most, while Ray starts or the actors are full (as Arrow rows, about
# 400 bytes each on bench_build.py's pool): past it, admission waits for results.
HELD_ASKS = 65_536
# Admitted rows classified at a time.
ADMIT_BATCH = 64
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the process names in its errors
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt): ")  # a traceback's last line
GENERATION_COLUMN = "generation"  # JSON of the generation made by the actor (null where it failed)
ERROR_COLUMN = "error"  # a block only generated: the error of each request that failed (null elsewhere)


class ExecutorError(OrandCarError):
    """The Ray executor cannot run or got results it cannot use; the message says why."""


def import_ray():
    """``ray``, or EngineUnavailable saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise EngineUnavailable(f"{RAY_MISSING} ({exc})") from None
    return ray


def check_ray() -> None:
    """EngineUnavailable (saying how to install it) where Ray is not installed, without importing
    it: the import (0.2-0.7 s) runs on the thread that starts Ray, while admission goes on."""
    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["ray"] is None (blocked)
        found = False
    if not found:
        raise EngineUnavailable(f"{RAY_MISSING} (no module named 'ray')")


def starts_local_cluster(address: Optional[str]) -> bool:
    """Whether ``ray.init(address=address)`` starts a new local cluster, rather than joining one
    (RAY_ADDRESS, a cluster started on this machine with ``ray start``): Ray's own answer. False
    where this Ray has moved it (then nothing is declared for the cluster, as before)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return False
    try:
        return canonicalize_bootstrap_address(address) is None
    except Exception:  # noqa: BLE001 - a bad address: ray.init says so
        return False


class GenerateAndDecide:
    """The Ray actor: one engine per actor; ``decide`` takes a block of admitted rows (``__call__``
    one engine batch of them) and returns their decision records plus the generations (as JSON) for
    the driver's cache; ``generate`` returns only the generations (and the errors of the requests
    that failed), for the driver to decide."""

    def __init__(self, factory, expected_engine: str, families: Families):
        self.families = families  # the build's registry, shipped as a value: the driver's prompts and rules
        self.engine = factory.create()
        fingerprint = public_fingerprint(self.engine)
        if engine_hash(fingerprint) != expected_engine:
            raise ExecutorError(
                f"the engine made on this Ray worker has another fingerprint than the driver's "
                f"({fingerprint}); install the same engine versions and models on every node")

    def __call__(self, batch: pa.Table) -> pa.Table:
        return _records_table(*self._records(batch.to_pylist()))

    def decide(self, block: pa.Table, batch_size: int) -> pa.Table:
        """A block's records, its rows handed to the engine ``batch_size`` at a time, as one table
        of one chunk per column: a table concatenated from the batches' tables had a chunk per
        batch in each of its 43 columns, and Ray serialized every chunk's buffers apart (3,000 a
        block of 1,024 items; 0.7 s of the actor's CPU and more of the driver's at 20k items)."""
        rows = block.to_pylist()
        records, blobs = [], []
        for start in range(0, len(rows), batch_size):
            batch_records, batch_blobs = self._records(rows[start:start + batch_size])
            records += batch_records
            blobs += batch_blobs
        return _records_table(records, blobs)

    def generate(self, block: pa.Table, batch_size: int) -> pa.Table:
        """A block's generations as JSON (null where the request failed) and the error of each
        request that failed (null elsewhere), in the block's order: a block the driver decides."""
        rows = block.to_pylist()
        blobs: list[Optional[str]] = []
        errors: list[Optional[str]] = []
        for start in range(0, len(rows), batch_size):
            generations, failed = self._generate([request_of_row(row, self.families)
                                                  for row in rows[start:start + batch_size]])
            blobs += _to_json(generations)
            errors += failed
        return pa.table({GENERATION_COLUMN: pa.array(blobs, pa.string()), ERROR_COLUMN: pa.array(errors, pa.string())})

    def _records(self, rows: list[dict]) -> tuple[list[dict], list[Optional[str]]]:
        """One engine batch of admitted rows: their decision records, and their generations as
        JSON (None where the request failed)."""
        requests = [request_of_row(row, self.families) for row in rows]
        generations, errors = self._generate(requests)
        return _decision_records(rows, requests, generations, errors, self.families), _to_json(generations)

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


def _decision_records(rows: list[dict], requests: list[Request], generations: list[Optional[Generation]],
                      errors: list[Optional[str]], families: Families) -> list[dict]:
    """The records of admitted ``rows`` answered with ``generations`` (None where the request
    failed, with its error), as an actor decides them and the driver decides the blocks it takes:
    a rule that raises fails only its item; no generation: failed, with the request's error."""
    return decided_rows([(row, request.question, generation, error)
                         for row, request, generation, error in zip(rows, requests, generations, errors)], families)


def _to_json(generations: list[Optional[Generation]]) -> list[Optional[str]]:
    """The generations as the driver's cache stores them (None where the request failed)."""
    return [generation_to_json(generation) if generation is not None else None for generation in generations]


def _from_json(blobs: list[Optional[str]]) -> list[Optional[Generation]]:
    return [generation_from_json(blob) if blob is not None else None for blob in blobs]


def _records_table(records: list[dict], blobs: list[Optional[str]]) -> pa.Table:
    table = pa.Table.from_pylist(records, schema=DECISION_SCHEMA)
    return table.append_column(GENERATION_COLUMN, pa.array(blobs, pa.string()))


class RayExecutor:
    """Generation on Ray: ``replicas`` actors with ``gpus_per_replica`` GPUs (and
    ``cpus_per_replica`` CPUs) each, on the cluster at ``address`` (``None``: the running one, or
    a new local cluster)."""

    name = "ray"
    streams_admission = True  # takes GenerationJob.admitted_rows as they are admitted

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
        check_ray()
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
                "ray": _ray_version()}

    @property
    def ray(self):
        """The ``ray`` module, imported at first use (on the thread that starts Ray)."""
        return import_ray()

    def local_cpus(self) -> int:
        """The CPUs a local cluster this build starts declares: what its actors take. Ray prestarts
        one worker process per declared CPU (about 0.5 s of CPU and 50-100 MB each; all the
        machine's by default, 16 on a 16-core host) while only ``replicas`` are used, and with fewer CPUs than
        the actors take, the actors past them would never start and their blocks never run."""
        return max(1, math.ceil(self.replicas * self.cpus_per_replica))

    # -- driver ----------------------------------------------------------------------------

    def run(self, job: GenerationJob) -> Iterator[DecidedChunk]:
        if job.factory is None:
            raise ExecutorError("the ray executor makes one engine per replica: it needs an engine "
                                "name and options (an EngineFactory), not only an engine object")
        shutil.rmtree(WorkDir(job.work).ray_dir, ignore_errors=True)  # an earlier version's staging files
        t0 = time.perf_counter()
        with cached_generation(job.cache, job.engine, job.stats, job.progress) as cached:
            driver = _Driver(self, job, cached)
            try:
                yield from driver.run()
            finally:
                driver.close()
                job.add_time("generate", time.perf_counter() - t0)

    def _connect(self) -> bool:
        """Join the cluster (or start a local one); True when this call started Ray."""
        ray = self.ray
        if ray.is_initialized():
            return False
        options: dict[str, Any] = {}
        if starts_local_cluster(self.address):  # a cluster's CPUs are its own: declared only for ours
            options["num_cpus"] = self.local_cpus()
        ray.init(address=self.address, include_dashboard=False, log_to_driver=self.show_progress,
                 configure_logging=self.show_progress, **options)
        return True

    def _replicas(self, job: GenerationJob, fingerprint: dict) -> "_Replicas":
        """The actors, made now (each makes its engine as it starts)."""
        options: dict[str, Any] = {"num_cpus": self.cpus_per_replica, "max_concurrency": self.batches_per_replica,
                                   # Ray restarts a lost actor and runs its calls again, without limit
                                   # unless bounded (-1: no limit)
                                   "max_restarts": -1 if self.max_restarts is None else self.max_restarts,
                                   "max_task_retries": -1 if self.max_task_retries is None else self.max_task_retries}
        if self.gpus_per_replica:
            options["num_gpus"] = self.gpus_per_replica
        actor = self.ray.remote(GenerateAndDecide).options(**options)
        actors = [actor.remote(job.factory, engine_hash(fingerprint), job.families) for _ in range(self.replicas)]
        return _Replicas(self.ray, actors, job.batch_size, self.batches_per_replica * BLOCKS_AHEAD)


class _Driver:
    """One run of the Ray executor's driver: admitted rows in, DecidedChunks out (see the module
    docstring). Ray is imported on a thread of its own as the run begins, and started (or joined)
    there while admission goes on: at once when the cache holds nothing (every request will be
    asked: Ray's start, 4-5 s on a 2-core machine, then overlaps the admission's first second
    too), else at the first item to ask, so that a build whose every request is cached never
    starts it."""

    def __init__(self, executor: RayExecutor, job: GenerationJob, cached: CachedGeneration):
        self.executor, self.job, self.cached = executor, job, cached
        slots = executor.replicas * executor.batches_per_replica
        self.sizes = block_sizes(job.batch_size, slots)
        self.size = next(self.sizes)
        self.most_pending = HELD_ASKS
        self.pending = _Pending()  # asks for the next blocks
        self.open: set[str] = set()  # keys asked and not yet received
        self.waiting: dict[str, list[tuple[dict, Request]]] = {}  # items (admitted rows) sharing an open key
        self.sent = self.received = 0
        self.share = _DriverShare()  # the blocks it decides itself
        self.ray_start: Optional[_RayStart] = None  # Ray's thread, from the run's start
        self.replicas: Optional[_Replicas] = None  # the actors, once Ray is up
        self.out = ChunkGatherer(job.chunk_size)

    def run(self) -> Iterator[DecidedChunk]:
        self.ray_start = _RayStart(self.executor, go=_nothing_cached(self.cached))
        for rows in _admitted_batches(self.job):
            yield from self._admit(rows)
            self._send(final=False)
            yield from self._receive(wait=False)
            while len(self.pending) > self.most_pending:
                yield from self._receive(wait=True)
                self._send(final=False)
        while self.pending or (self.replicas is not None and self.replicas.busy):
            self._send(final=True)
            yield from self._receive(wait=True)
        if self.received != self.sent:
            raise ExecutorError(f"Ray returned {self.received} results for {self.sent} items asked")
        if self.waiting:  # a bug: every shared item waits on a key in flight
            raise RuntimeError(f"{sum(map(len, self.waiting.values()))} shared item(s) left unanswered")
        self.job.progress(self.job.stats)
        chunk = self.out.take()
        if chunk is not None:
            yield chunk

    def close(self) -> None:
        """Let the actors go; shut Ray down if this run started it."""
        if self.replicas is not None:
            self.replicas.close()
        if self.ray_start is not None:
            self.ray_start.close()

    # -- admitted rows in ----------------------------------------------------------------

    def _admit(self, rows: list[dict]) -> Iterator[DecidedChunk]:
        """Classify ``rows``: asks wait for the next block, hits are decided now, items sharing
        an earlier ask's key when that ask is received (at once when it was)."""
        job, cached = self.job, self.cached
        requests = [request_of_row(row, job.families) for row in rows]
        keys, classes, hits = cached.classify(requests)  # hits: the stored generations, one query
        if not self.ray_start.asked and ASK in classes:  # Ray starts while admission goes on
            self.ray_start.go()
        self.pending.add([row for row, kind in zip(rows, classes) if kind == ASK])
        for row, request, key, kind in zip(rows, requests, keys, classes):
            if kind == ASK:
                if key is not None:
                    self.open.add(key)
                continue
            if kind == SHARED and key in self.open:
                self.waiting.setdefault(key, []).append((row, request))
                continue
            chunk = self._decided(row, request, hits.get(key) if kind == HIT else cached.answer(key))
            if chunk is not None:
                yield chunk

    def _decided(self, row: dict, request: Request, generation: Optional[Generation]) -> Optional[DecidedChunk]:
        """A cached or shared item's record (its admitted row): decided on the stored generation,
        failed without one."""
        if generation is not None:
            generation = for_request(generation, request)
        (record,) = decided_rows([(row, request.question, generation, SAME_REQUEST_FAILED)], self.job.families)
        return self.out.add(request, generation, record)

    def _send(self, final: bool) -> None:
        """The pending asks as blocks (``block_sizes``) to the actors with room for them; with
        ``final`` (admission done), or past ``most_pending``, short blocks too. Waits for Ray's start
        only then; until then the asks stay pending while admission goes on."""
        full = len(self.pending) > self.most_pending
        if not self.pending or not self._ready(wait=final or full):
            return
        while self.pending and (final or full or len(self.pending) >= self.size) and self.replicas.has_room():
            block = self.pending.take(self.size)
            self.replicas.submit(block, here=self.share.take())
            self.sent += block.num_rows
            self.size = next(self.sizes)
            full = len(self.pending) > self.most_pending

    def _ready(self, wait: bool) -> bool:
        """Whether Ray is up and the actors made (made now, once it is)."""
        if self.replicas is not None:
            return True
        if not self.ray_start.asked or not (wait or self.ray_start.ready.is_set()):
            return False
        self.ray_start.wait()
        self.replicas = self.executor._replicas(self.job, self.cached.fingerprint)
        return True

    # -- results out ---------------------------------------------------------------------

    def _receive(self, wait: bool) -> Iterator[DecidedChunk]:
        """The records of the blocks done (one at least with ``wait``), each block's complete
        generations committed to the cache before its records are handed on."""
        if self.replicas is None:
            return
        done = self.replicas.done(wait)
        if wait and done:  # nothing running: no wait to learn from
            self.share.after_wait(self.replicas.waited, len(done))
        for table, block in done:
            yield from self._received(table, block)

    def _received(self, table: pa.Table, block: Optional[pa.Table] = None) -> Iterator[DecidedChunk]:
        """A block's results: its records (``block`` None: its actor decided it), or its
        generations, decided here on ``block``'s admitted rows."""
        job, cached = self.job, self.cached
        if block is None:
            rows = table.to_pylist()
            generations = _from_json([row.pop(GENERATION_COLUMN) for row in rows])
        else:
            rows, generations = self._decided_here(block, table)
        requests = [Request(item_id=row["id"], question=row["question"], family=row["family"],
                            image=_image_of(row)) for row in rows]
        keys = request_keys(cached.fingerprint, requests) if cached.cache is not None else [None] * len(rows)
        entries = [(k, g) for k, g in zip(keys, generations) if g is not None and is_complete(g)]
        self.received += len(rows)
        job.stats.asked += len(rows)
        job.stats.uncached += sum(1 for g in generations if g is not None) - len(entries)
        if entries and cached.commits is not None:
            cached.commits.add_many(entries)
            cached.commits.flush()  # committed before its rows are handed on
        for row, request, generation, key in zip(rows, requests, generations, keys):
            chunk = self.out.add(request, generation, row)
            if chunk is not None:
                yield chunk
            if key is None:
                continue
            self.open.discard(key)
            stored = generation if generation is not None and is_complete(generation) else None
            for sharing, shared in self.waiting.pop(key, ()):
                chunk = self._decided(sharing, shared, stored)
                if chunk is not None:
                    yield chunk
        job.progress(job.stats)

    def _decided_here(self, block: pa.Table, table: pa.Table) -> tuple[list[dict], list[Optional[Generation]]]:
        """The records of a block its actor only generated (``table``: GENERATION_COLUMN and
        ERROR_COLUMN), decided here as the actor decides, and its generations. As the actor does,
        on a thread that is not the main one: the ``math`` rule's time limits (``signal.alarm``)
        hold on the main thread only (``verify.math_answer.timeouts``), and the actors decide on
        the threads of their concurrent calls, so a block decided here on the main thread could
        get another record than on its actor for a reply whose parse runs past the limit."""
        admitted = block.to_pylist()
        generations = _from_json(table.column(GENERATION_COLUMN).to_pylist())
        errors = table.column(ERROR_COLUMN).to_pylist()
        if len(generations) != len(admitted):
            raise ExecutorError(f"Ray returned {len(generations)} generations for a block of {len(admitted)} items")
        requests = [request_of_row(row, self.job.families) for row in admitted]
        return _off_the_main_thread(_decision_records, admitted, requests, generations, errors,
                                    self.job.families), generations


def _off_the_main_thread(function, *args):
    """``function(*args)`` on a thread of its own, waited for; what it raises is raised here. The
    thread is a daemon: a Ctrl-C that stops the wait does not hold the interpreter's exit until
    the block is decided."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as exc:  # noqa: BLE001 - raised on the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="orandcar-ray-decide", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


class _DriverShare:
    """Which blocks the driver decides itself, their actor only generating them. An actor decides
    the items of its blocks on the one core it has, between its engine's batches, while the driver
    waits for the results; deciding costs about what generating costs with a fast engine (the
    replay engine: 1.4 of an actor's 2.7 s of CPU at 20k items). The driver's share of the blocks
    starts at START and moves by STEP after each wait for results: up when the driver waited
    WAITED_S or more (the actors are the slower side), down when it found three results or more
    there already (they waited for the driver, which is); one or two there already (the next of a
    steady stream, an actor's batches ending together) leave it. So a driver beside a GPU cluster,
    waiting most of the time, comes to decide every block, and one that falls behind (many
    replicas, rules that cost much: ``math``) hands the deciding back to the actors. The blocks
    are given by the share in turn (a credit that gains the share with each block), not at random.
    The records are the same wherever a block is decided."""

    START = 0.5
    STEP = 0.125
    WAITED_S = 0.002

    def __init__(self):
        self.share = self.START
        self._credit = 0.0

    def take(self) -> bool:
        """Whether the driver decides the next block."""
        self._credit += self.share
        if self._credit >= 1.0 - 1e-9:
            self._credit -= 1.0
            return True
        return False

    def after_wait(self, seconds: float, results: int) -> None:
        """After a wait for results that took ``seconds`` and found ``results``."""
        if seconds >= self.WAITED_S:
            self.share = min(1.0, self.share + self.STEP)
        elif results > 2:
            self.share = max(0.0, self.share - self.STEP)


class _RayStart:
    """Ray on a thread of its own, so that admission goes on while it starts: the thread imports
    Ray at once, starts it (``ray.init``, or joins the cluster) once ``go`` is called (at once
    with ``go=True``), and shuts it down at ``close`` if it started it. The thread lives until
    then: Ray starts its local processes (raylet, object store, GCS) with PR_SET_PDEATHSIG, which
    kills them when the *thread* that started them ends, so a thread that returned after
    ``ray.init`` took the cluster down with it and the driver exited 1, without a message, at its
    next Ray call.

    ``close`` lets the shutdown (1-2 s of a local cluster) run while the build goes on to write
    its shards; the next start in this process, and the interpreter's exit, wait for it first."""

    _last: Optional[threading.Thread] = None  # the last thread that started Ray in this process

    def __init__(self, executor: RayExecutor, go: bool = False):
        self.executor = executor
        self.ready = threading.Event()  # Ray is up (or failed to start): see wait()
        self.error: Optional[BaseException] = None
        self._go = threading.Event()
        self._stop = threading.Event()
        if go:
            self._go.set()
        previous, _RayStart._last = _RayStart._last, None
        self._thread = threading.Thread(target=self._run, args=(previous,), name="ray-start", daemon=True)
        self._thread.start()

    @property
    def asked(self) -> bool:
        """Whether Ray was asked to start (``go``)."""
        return self._go.is_set() and not self._stop.is_set()

    def go(self) -> None:
        """Start Ray now (on the thread; ``wait`` for it)."""
        self._go.set()

    def wait(self) -> None:
        """Until Ray is up; raises what importing or starting it raised."""
        self.ready.wait()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def close(self) -> None:
        """Let Ray go (shut down on the thread, if it started it), without waiting."""
        self._stop.set()
        self._go.set()  # a thread still waiting to start Ray ends
        if _RayStart._last is None:
            atexit.register(_RayStart.join_last)  # after Ray's own: runs before it
        _RayStart._last = self._thread

    @staticmethod
    def join_last() -> None:
        last = _RayStart._last
        if last is not None:
            last.join()

    def _run(self, previous: Optional[threading.Thread]) -> None:
        if previous is not None:  # an earlier build's Ray still shutting down
            previous.join()
        started, ray = False, None
        worker_log = logging.getLogger("ray._private.worker")
        worker_log.addFilter(_not_main_thread_note)
        try:
            ray = self.executor.ray  # the import, while the driver waits for its first rows
            self._go.wait()
            if not self._stop.is_set():
                started = self.executor._connect()
        except BaseException as exc:  # noqa: BLE001 - raised on the driver's thread by wait()
            self.error = exc
        finally:
            worker_log.removeFilter(_not_main_thread_note)
            self.ready.set()
        self._stop.wait()
        if started:
            ray.shutdown()


def _not_main_thread_note(record: logging.LogRecord) -> bool:
    """Ray's note that it set no SIGTERM handler off the main thread: the build handles its signals."""
    return not record.getMessage().startswith("SIGTERM handler is not set")



class _Pending:
    """The asks not yet sent, as Arrow record batches (compact: the driver may hold HELD_ASKS)."""

    def __init__(self):
        self.batches: list[pa.RecordBatch] = []
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, rows: list[dict]) -> None:
        if rows:
            self.batches.append(pa.RecordBatch.from_pylist(rows, schema=ADMITTED_SCHEMA))
            self.rows += len(rows)

    def take(self, n: int) -> pa.Table:
        """The first ``n`` rows (or all there are), in buffers of their own."""
        table = pa.Table.from_batches(self.batches, schema=ADMITTED_SCHEMA)
        rest = table.slice(n)
        self.batches, self.rows = rest.to_batches(), rest.num_rows
        return table.slice(0, n).combine_chunks()


class _Replicas:
    """The actors and the blocks they run. Each actor is given at most ``per_actor`` blocks at a
    time (as many as it runs at once and as many again waiting behind them, so that it never
    waits for the driver), the least loaded first; the driver takes the blocks' records as they
    are done, in any order (the build sorts them)."""

    def __init__(self, ray, actors: list, batch_size: int, per_actor: int):
        self.ray, self.actors, self.batch_size, self.per_actor = ray, actors, batch_size, per_actor
        self.load = [0] * len(actors)
        self.running: dict[Any, int] = {}  # the result's ObjectRef -> its actor
        self.blocks: dict[Any, pa.Table] = {}  # the result's ObjectRef -> its block, where only generated
        self.waited = 0.0  # seconds the last done(wait=True) waited for a result

    @property
    def busy(self) -> bool:
        return bool(self.running)

    def has_room(self) -> bool:
        return min(self.load) < self.per_actor

    def submit(self, block: pa.Table, here: bool = False) -> None:
        """Give ``block`` to the least loaded actor: to decide, or with ``here`` only to generate
        (the block is kept, for the driver to decide its items on)."""
        actor = self.load.index(min(self.load))
        if here:
            ref = self.actors[actor].generate.remote(block, self.batch_size)
            self.blocks[ref] = block
        else:
            ref = self.actors[actor].decide.remote(block, self.batch_size)
        self.running[ref] = actor
        self.load[actor] += 1

    def done(self, wait: bool) -> list[tuple[pa.Table, Optional[pa.Table]]]:
        """The results of the blocks done (waiting for one with ``wait``; ``waited`` says how
        long), each with its block where the actor only generated it, else None; raises the
        job's error."""
        if not self.running:
            return []
        refs = list(self.running)
        t0 = time.perf_counter()
        ready, _ = self.ray.wait(refs, num_returns=1, timeout=None if wait else 0)
        if wait:
            self.waited = time.perf_counter() - t0
        if ready:
            ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        results = []
        for ref in ready:
            self.load[self.running.pop(ref)] -= 1
            block = self.blocks.pop(ref, None)
            try:
                results.append((self.ray.get(ref), block))
            except Exception as exc:  # Ray's errors wrap ours (with a traceback): show the cause, keep the chain
                raise ExecutorError(f"the Ray job failed: {_cause(exc)}") from exc
        return results

    def close(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - gone already
                pass


def _ray_version() -> str:
    """The installed Ray's version, read without importing it where its metadata says."""
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:  # importable without metadata (a source tree)
        return import_ray().__version__


def _nothing_cached(cached: CachedGeneration) -> bool:
    """Whether every request of this build will be asked: no cache, or one that holds nothing."""
    return cached.cache is None or len(cached.cache) == 0


def _admitted_batches(job: GenerationJob) -> Iterator[list[dict]]:
    """The admitted rows in pool order (``base.admitted_rows``), ADMIT_BATCH at a time."""
    rows = admitted_rows(job)
    while True:
        batch = list(islice(rows, ADMIT_BATCH))
        if not batch:
            return
        yield batch


def block_sizes(batch_size: int, slots: int) -> Iterator[int]:
    """Rows of each block handed to Ray, in turn: ``slots`` blocks (one per batch slot: replicas
    times batches per replica) of one engine batch, then ``slots`` of two, doubling up to
    BLOCK_BATCHES batches. The first asks go out once one batch is admitted, every slot gets
    blocks when there are few asks, and a large pool is a few dozen tasks, not one per batch."""
    batches = 1
    while True:
        for _ in range(max(1, slots)):
            yield batch_size * batches
        batches = min(BLOCK_BATCHES, 2 * batches)


def _cause(exc: BaseException) -> str:
    """The most specific message in a Ray error: our own error's text where it carries one, else
    Ray's first line (without the process details) and the last exception line of the traceback
    it carries: an actor that could not be made on a node says why (on a cluster, most often a
    node with another version of this package: ``Can't get attribute ... on <module ... from
    PATH>``), not only that it died."""
    text = _ANSI.sub("", str(exc))
    marker = f"{ExecutorError.__name__}: "
    if marker in text:
        return text.split(marker, 1)[1].splitlines()[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first = lines[0].split(" (pid=", 1)[0]
    last = next((line for line in reversed(lines[1:]) if _EXCEPTION_LINE.match(line)), None)
    return f"{first}: {last}" if last else first


def _image_of(row: dict) -> ImageRef:
    return ImageRef(path=row["image"], sha256=row["image_sha256"])
