"""Deciding on a process of its own, beside the local executor's cache path and engine.

Deciding an answered item (``steps.decided_rows``: the final-answer extraction, the family's
rule, the decision record) costs about as much as getting its generation through the cache. In
the build's process it leaves the second core idle whenever the admission does not run there (a
rerun reuses the admission) and lengthens the stream when it does. ``Decider`` sends the answered
items, a batch at a time, to one spawned process that decides them with the same code and sends
back each batch's records as one Arrow table (DECISION_SCHEMA, in the batch's order), which the
generate stage appends to work/decisions.parquet as it is: no record becomes a dict in the build's
process. The records are those of deciding in the build's process, value for value.

- At most IN_FLIGHT batches are out at once. When that many are out and none is back, the batch
  in hand is decided in the build's process instead, so neither process waits for the other (a
  rerun, whose generations all come from the cache, keeps both cores busy; a build whose engine
  is the slower side never decides here), and memory holds a few batches whichever side is
  slower. The process reads its next batch while a thread of its own sends the tables back
  (``childproc.QueuedSender``), so neither side can block the other for ever.
- The chunks are handed back in the order their batches were submitted, wherever each was
  decided: a batch decided here waits behind the batches still out before it. So when the answers
  come in pool order (a rerun answered from the cache) the decisions are written in pool order,
  and ``ordering.sort_by_order`` only renames the file. Until the process says it is ready (its
  start, about a second, imports the package) every batch is decided here and handed back at once,
  so none waits behind a batch the process has not begun. When more than HELD batches are
  submitted and not handed back (the process is stuck on one), those decided are handed back at
  once, out of order (the sort puts them in order): memory stays bounded and the build's process
  never waits for the order.
- The process is given the build's families and the rule registry's entries (a rule registered
  at run time is registered there too) and imports the rules itself.
- A rule's own error is a ``decision_failed`` record there, as here; any other error (a bug) is
  raised in the build's process with its message, and a process that dies is a DeciderError
  naming its exit code.
- ``close`` ends the process (a build that stops early: an engine error, Ctrl-C). The process
  ignores the terminal's Ctrl-C and ends once the build's process is gone.
"""

from __future__ import annotations

import gc
import multiprocessing
import operator
import os
import signal
import time
from collections import deque
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import pyarrow as pa

from ..childproc import Failed, QueuedSender, can_spawn, error_of, exit_on_term, run_sending
from ..errors import OrandCarError
from ..families import Families
from ..images import start_worker
from ..interrupts import sigint_blocked
from ..pool.prefetch import usable_cpus
from ..records import DECISION_SCHEMA, Generation, Request
from ..verify import RULE_MODULES
from .base import DecidedChunk
from .steps import decided_rows

# Items per batch sent to the process: a batch's pickling and its table's overhead stay small
# against its deciding, and the batches in flight are about 1 MB.
DECIDE_BATCH = 256
# Batches sent and not yet decided (back) at most.
IN_FLIGHT = 4
# Batches submitted and not handed back (out, or decided and waiting behind one out), at most:
# 8,192 items, their records as Arrow tables (two row groups of the decisions file,
# WORK_ROW_GROUP_ROWS) beside their requests and generations, which every batch out holds too. At
# 200k QA a rerun's batches then came back in order; 8 and 16 let a hiccup of the process (1-2 in
# a run) reorder a few, and the file then needs the whole sort.
HELD = 8 * IN_FLIGHT
# The process's first message: it has started and takes batches.
READY = "ready"
# The pipes' buffer (``_widen``): a few batches either way (a batch of the 200k benchmark is about
# 120 kB pickled, its table about 140 kB), the most Linux allows by default (/proc/sys/fs/pipe-max-size).
PIPE_BYTES = 1 << 20
# Seconds ``close`` waits for the process to end before killing it.
STOP_WAIT_S = 10.0
# A build decides on the process when not told otherwise (``on_process``) from a pool file of this
# many bytes (about 5,000 lines) and a ``--limit`` of this many lines or none: below, the process's
# start (about 0.4 s of CPU before its first batch, more when a rule imports a heavy library) costs
# more than it saves.
MIN_POOL_BYTES = 1 << 20
MIN_ITEMS = 4096


def on_process(pool: Path, limit: Optional[int]) -> bool:
    """Whether a build of ``pool`` (at most ``limit`` lines) decides on a process of its own when
    not told: a large pool, two or more CPUs, and a main program a process can be spawned from."""
    try:
        size = pool.stat().st_size
    except OSError:
        return False
    return (size >= MIN_POOL_BYTES and (limit is None or limit >= MIN_ITEMS) and usable_cpus() >= 2
            and can_spawn())


class DeciderError(OrandCarError):
    """The decider process ended without saying why (killed, out of memory), or failed with an
    error that could not be sent as it is."""


@dataclass(frozen=True)
class _Decided:
    table: bytes  # the batch's records, an Arrow IPC stream (DECISION_SCHEMA)
    seconds: float  # spent deciding and making the table


@dataclass
class _Sent:
    """A batch handed to the process: what stays here, and its chunk once its table is back."""

    requests: list[Request]
    generations: list[Optional[Generation]]
    chunk: Optional[DecidedChunk] = None


def _decided(entry: DecidedChunk | _Sent) -> Optional[DecidedChunk]:
    """A submitted batch's chunk: itself (decided here), or its table's once back (None before)."""
    return entry.chunk if isinstance(entry, _Sent) else entry


class Decider:
    """One decider process for one generate stage (see the module docstring). Use as a context
    manager: ``submit`` a batch of answered items, ``finish`` once every batch is submitted; each
    yields the DecidedChunks of the batches decided so far, in the order the batches were
    submitted (``table`` filled for those decided there and for those decided here that waited
    behind them; ``rows`` for the others)."""

    def __init__(self, families: Families):
        self.families = families
        self.seconds = 0.0  # the process's seconds deciding
        self.waited = 0.0  # this process's seconds waiting for it (handing over a batch, or for a table)
        self.decided_here = 0  # items decided in the build's process: before it was ready, or while it was busy
        self.process = None
        self.ready = False  # the process said READY
        # Every batch submitted and not yet handed back, oldest first: a chunk decided here, or a
        # batch sent (its chunk filled once its table is back); ``_out``: the sent ones not back.
        self._pending: deque[DecidedChunk | _Sent] = deque()
        self._out: deque[_Sent] = deque()
        self._tasks = self._results = None

    def __enter__(self) -> "Decider":
        context = multiprocessing.get_context("spawn")
        task_reader, self._tasks = context.Pipe(duplex=False)
        self._results, result_writer = context.Pipe(duplex=False)
        for connection in (self._tasks, self._results):
            _widen(connection)
        rules = dict(RULE_MODULES.items())
        self.process = context.Process(target=run_decider, name="orandcar-decider",
                                       args=(task_reader, result_writer, self.families, rules, os.getpid()))
        with sigint_blocked():  # the process never sees the terminal's Ctrl-C
            self.process.start()
        task_reader.close()  # the process holds the only other ends: theirs closing is EOF here
        result_writer.close()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(self, items: Sequence[tuple[dict, Request, Optional[Generation], Optional[str]]],
               here: Callable[[list], DecidedChunk]) -> Iterator[DecidedChunk]:
        """Hand over a batch of answered items, each ``(admitted row, request, generation or
        None, error)`` (the request stays here: the process gets its question); yields
        the chunks of the batches decided meanwhile. While IN_FLIGHT batches are out and none is
        back, the batch is decided here instead (``here(items)``), so that neither process waits
        for the other: the slower side gets fewer batches. Until the process is ready every
        batch is decided here."""
        while self._out and self._results.poll():
            self._receive()
        yield from self._ready()
        if not self.ready and self._results.poll():
            self._take_ready()
        if not self.ready or len(self._out) >= IN_FLIGHT:
            self.decided_here += len(items)
            chunk = here(list(items))
            if not self._pending:  # nothing before it (the process is not ready yet)
                yield chunk
                return
            if chunk.table is None:  # it waits as Arrow, what the decisions file makes of its records anyway
                chunk = DecidedChunk(chunk.requests, chunk.generations, [],
                                     pa.Table.from_pylist(chunk.rows, schema=DECISION_SCHEMA))
            self._pending.append(chunk)
            if len(self._pending) > HELD:  # the process is stuck on a batch: hand back what is decided
                yield from self._out_of_order()
            return
        t0 = time.perf_counter()
        try:
            self._tasks.send([(row, request.question, _fields(generation), error)
                              for row, request, generation, error in items])
        except OSError:  # the process is gone: its message, or its exit code
            yield from self._drain_after_death()
            raise self._died() from None
        finally:
            self.waited += time.perf_counter() - t0
        sent = _Sent([request for _, request, _, _ in items], [generation for _, _, generation, _ in items])
        self._pending.append(sent)
        self._out.append(sent)

    def finish(self) -> Iterator[DecidedChunk]:
        """The chunks of every batch not yet handed back; then the process is told to end."""
        while self._out:
            self._receive()
            yield from self._ready()
        yield from self._ready()
        try:
            self._tasks.send(None)
        except OSError:
            raise self._died() from None

    def close(self) -> None:
        for connection in (self._tasks, self._results):
            if connection is not None:
                connection.close()
        self._tasks = self._results = None
        process = self.process
        if process is None:
            return
        process.join(0 if self._out else STOP_WAIT_S)  # told to end (finish), or its pipe closed just now
        if process.is_alive():
            process.terminate()
            process.join(STOP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()

    def _ready(self) -> Iterator[DecidedChunk]:
        """The chunks at the front of the submitted batches that are decided, in order."""
        pending = self._pending
        while pending and _decided(pending[0]) is not None:
            yield _decided(pending.popleft())

    def wait_ready(self) -> None:
        """Wait until the process takes batches (its start done)."""
        if not self.ready:
            self._take_ready()

    def _take_ready(self) -> None:
        message = self._message()
        if message != READY:  # a bug: the protocol starts with READY
            raise DeciderError(f"the decider process sent {type(message).__name__} before saying it was ready")
        self.ready = True

    def _out_of_order(self) -> Iterator[DecidedChunk]:
        """Every chunk decided so far, those behind a batch still out too, in the order submitted."""
        entries = list(self._pending)
        self._pending = deque(entry for entry in entries if _decided(entry) is None)
        yield from (_decided(entry) for entry in entries if _decided(entry) is not None)

    def _message(self):
        """The process's next message (waiting for it); its error raised here."""
        t0 = time.perf_counter()
        try:
            message = self._results.recv()
        except (EOFError, OSError):  # gone, or killed in the middle of a message
            raise self._died() from None
        finally:
            self.waited += time.perf_counter() - t0
        if isinstance(message, Failed):
            raise error_of(message, lambda text: DeciderError(f"deciding failed in the decider process: {text}"))
        return message

    def _receive(self) -> None:
        """The table of the oldest batch out (waiting for it), into that batch's chunk."""
        message = self._message()
        sent = self._out.popleft()
        table = pa.ipc.open_stream(message.table).read_all()
        self.seconds += message.seconds
        sent.chunk = DecidedChunk(requests=sent.requests, generations=sent.generations, rows=[], table=table)

    def _drain_after_death(self) -> Iterator[DecidedChunk]:
        """What the process sent before it ended (its error, if it sent one, is raised), and the
        batches decided here before the first one it did not send back."""
        while self._out and self._results.poll():
            try:
                self._receive()
            except DeciderError:
                break
        yield from self._ready()

    def _died(self) -> DeciderError:
        self.process.join(STOP_WAIT_S)
        return DeciderError(f"the decider process ended abruptly (exit code {self.process.exitcode}: killed, or "
                            f"out of memory); build again")


def _widen(connection) -> None:
    """Give the pipe under ``connection`` PIPE_BYTES of buffer where the system allows (Linux):
    a batch then goes in at once instead of waiting, 64 kB at a time, for the other side to read."""
    try:
        import fcntl

        fcntl.fcntl(connection.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):  # not Linux, or above /proc/sys/fs/pipe-max-size: the default
        pass


_GENERATION_FIELDS = tuple(f.name for f in fields(Generation))


_field_values = operator.attrgetter(*_GENERATION_FIELDS)


def _fields(generation: Optional[Generation]) -> Optional[tuple]:
    """A generation as the tuple of its fields: pickled and rebuilt in about half the time."""
    if generation is None:
        return None
    return _field_values(generation)


# --- the decider process ----------------------------------------------------------------------


def run_decider(tasks, results, families: Families, rules: dict[str, str], parent: int) -> None:
    """The decider process's body (``Decider``): decide each batch read from ``tasks`` and send its
    table to ``results``, until told to end (None) or the build's process closes the pipe."""
    start_worker(parent)  # Ctrl-C is the build's; it ends once the build's process is gone
    signal.signal(signal.SIGTERM, exit_on_term)
    for name, target in rules.items():
        if RULE_MODULES.get(name) != target:
            RULE_MODULES[name] = target
    gc.freeze()  # the modules' objects: not traversed by each collection deciding starts (``heap.py``)
    sender = QueuedSender(results, IN_FLIGHT + 1, "decider-sender")
    run_sending(sender, lambda: _decide_batches(tasks, sender, families), results, tasks)


def _decide_batches(tasks, sender: QueuedSender, families: Families) -> None:
    sender.put(READY)
    while True:
        try:
            items = tasks.recv()
        except (EOFError, OSError):  # the build's process stopped
            return
        if items is None:
            return
        t0 = time.perf_counter()
        items = [(row, question, Generation(*values) if values is not None else None, error)
                 for row, question, values, error in items]
        table = pa.Table.from_pylist(decided_rows(items, families), schema=DECISION_SCHEMA)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, DECISION_SCHEMA) as writer:
            writer.write_table(table)
        sender.put(_Decided(sink.getvalue().to_pybytes(), time.perf_counter() - t0))
