"""The admission on a process of its own, streaming its rows to the build's process.

Admission is sequential where order matters (the ids and QA already seen, purity's shares, the
remembered image checks) and costs about as much per item as generating through the cache and
deciding do together. Run in the build's process, it leaves the second core idle. Here the whole
of it (``admit_records``: read and clean the pool, write work/admitted.parquet,
work/dropped.jsonl and work/admission_images.parquet, record the admission for reuse) runs in one
spawned process, the same code in the same order, so its records and files are byte for byte
those of an admission in the build's process. The build's process receives the admitted rows in
``AdmittedRows`` messages as they are admitted and feeds them to the engine meanwhile; the last
message, ``AdmissionDone``, comes once the files are in place.

The process is started before the build makes its engine (``AdmissionProcess.start``, from
``Admission.prepare``): it imports what it needs and reads the pool's first pass (ids, purity: no
image) meanwhile, then waits on a pipe until ``messages()`` lets it open the images, so an engine
that cannot be made still stops the build before any image is read (the pipe closed unsent ends
the process).

How the two stay bounded and stop together:

- The admission process runs at most ``QUEUED_MESSAGES`` messages ahead of what the build's
  process has received (a sender thread writes them to the pipe; the pipe blocks when the build's
  process does not read).
- An error in the admission process (a bad pool file, a dead image worker, a bug) is sent as the
  exception itself where it can be pickled, so the build stops with the message it would have
  given in its own process; the partial work files are removed there.
- A build that stops early (an engine error, Ctrl-C) closes the pipe and ends the process
  (SIGTERM, which it turns into SystemExit so that its ``with`` blocks remove the partial files).
- Ctrl-C is the build's to handle (``interrupts``): the process is started with SIGINT blocked
  and ignores it. It ends when the build's process is gone (``images.exit_with_parent``), even if
  that one was killed outright.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
from collections import Counter
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from ..childproc import Failed, QueuedSender, error_of, exit_on_term, exiting, run_sending
from ..clean.pool_file import clean_lines
from ..errors import OrandCarError
from ..families import Families
from ..files import JsonLinesFile
from ..images import ImagePolicy, start_worker
from ..interrupts import sigint_blocked
from ..records import ADMITTED_SCHEMA, Dropped, admitted_row
from ..workdir import WorkDir
from . import reuse
from .workfiles import ParquetFile, WorkFiles

# Admitted rows in the first message; each next message has twice as many, up to MESSAGE_ROWS: the
# first rows reach the engine soon, then a message's overhead stays small against its rows.
FIRST_MESSAGE_ROWS = 16
MESSAGE_ROWS = 512
# A message also goes out after this many pool lines or seconds, rows or not, so that the
# progress bar and the drop counts move while many lines in a row are dropped.
MESSAGE_LINES = 4096
MESSAGE_SECONDS = 0.25
# Messages the admission process keeps ready ahead of the build's process.
QUEUED_MESSAGES = 8
# Seconds the build's process waits for a stopped admission process to end before killing it.
STOP_WAIT_S = 10.0


class AdmissionProcessError(OrandCarError):
    """The admission process ended without saying why (killed, out of memory), or failed with an
    error that could not be sent as it is."""


@dataclass(frozen=True)
class AdmitTask:
    """Everything an admission needs (it is pickled to the admission process): the pool and work
    dir, ``--limit``, the image policy, the processes that check images (``image_workers``, 1:
    the admission's own), the build's families, and the inputs found at the build's start
    (``reuse.Inputs``), which the admission records when it completes."""

    pool: Path
    work: Path
    limit: Optional[int]
    images: Optional[ImagePolicy]
    image_workers: int
    families: Optional[Families]
    inputs: reuse.Inputs


def admit_records(task: AdmitTask, clean_report: dict, dropped: Counter,
                  before_images: Optional[Callable[[], None]] = None) -> Iterator[Optional[dict]]:
    """Admit the pool: one value per pool line, in order: its admitted row (ADMITTED_SCHEMA), or
    None for a dropped line (counted in ``dropped`` by reason, written to work/dropped.jsonl).
    work/admitted.parquet, work/dropped.jsonl and work/admission_images.parquet are in place once
    the values are exhausted (removed if the stream is closed early or fails), ``clean_report``
    filled, and the admission recorded for reuse (``reuse.record``) unless a file it read may
    have changed meanwhile. ``before_images``: called before the first image file is opened,
    after the pool's first pass (``clean_lines``)."""
    work = WorkDir(task.work)
    admitted = 0
    with WorkFiles(admitted=ParquetFile(work.admitted, ADMITTED_SCHEMA),
                   dropped=JsonLinesFile(work.dropped),
                   images=ParquetFile(work.admission_images, reuse.IMAGES_SCHEMA)) as files:
        named = reuse.NamedFiles(files.images, task.inputs.start_ns)
        for record in clean_lines(task.pool, clean_report, limit=task.limit, spill_dir=task.work,
                                  images=task.images, workers=task.image_workers, named=named,
                                  families=task.families, before_images=before_images):
            if isinstance(record, Dropped):
                files.dropped.write(record.to_dict())
                dropped[record.reason] += 1
                yield None
            else:
                row = admitted_row(record)
                files.admitted.add(row)
                admitted += 1
                yield row
    if not named.racy:
        reuse.record(task.work, task.inputs, {"admitted": admitted, "dropped": dict(dropped),
                                              "cleaning": clean_report})


@dataclass(frozen=True)
class AdmittedRows:
    """The rows admitted since the last message, the pool ``lines`` read meanwhile, and the drop
    counts so far (by reason)."""

    rows: list
    lines: int
    dropped: dict


@dataclass(frozen=True)
class AdmissionDone:
    """The admission is complete and its files are in place: its cleaning report, drop counts,
    items admitted and seconds spent admitting (not waiting on the build's process)."""

    clean_report: dict
    dropped: dict
    admitted: int
    seconds: float


class AdmissionProcess:
    """The admission process on ``task``: ``start()`` spawns it, and it reads the pool's first pass
    (ids, purity) at once but opens no image file until ``messages()`` lets it go on; ``messages()``
    (which starts it if need be) yields its messages (``AdmittedRows``..., then one
    ``AdmissionDone``); ``close()`` ends a process whose messages were not all read (it removes its
    partial files). See the module docstring."""

    def __init__(self, task: AdmitTask):
        self.task = task
        self.process = None  # the admission process once started (its ``pid``, ``exitcode``)
        self._receiver = self._go = None  # its messages; the pipe that lets it read images

    def start(self) -> None:
        """Spawn the process, if not yet started: it imports what it needs and reads the pool's
        first pass while the build goes on (makes its engine); it waits for ``messages()``
        before it opens any image file."""
        if self.process is not None:
            return
        context = multiprocessing.get_context("spawn")
        receiver, sender = context.Pipe(duplex=False)
        go_receiver, go = context.Pipe(duplex=False)
        process = context.Process(target=run_admission, args=(sender, self.task, os.getpid(), go_receiver),
                                  name="orandcar-admission")
        try:
            with sigint_blocked():  # the process never sees the terminal's Ctrl-C
                process.start()
        except BaseException:  # a failed start, or a Ctrl-C held while it started (raised here)
            for end in (receiver, sender, go_receiver, go):
                end.close()
            if process.pid is not None:  # started: ended now, not left to finish its first pass
                process.kill()
                process.join()
            raise
        # The process holds the only write end of its messages (its end is this end's EOF) and the
        # only read end of ``go`` (closed unsent: it ends without opening an image).
        sender.close()
        go_receiver.close()
        self.process, self._receiver, self._go = process, receiver, go

    def messages(self) -> Iterator[Union[AdmittedRows, AdmissionDone]]:
        self.start()
        process, receiver = self.process, self._receiver
        done = False
        try:
            self._let_go()
            while not done:
                try:
                    message = receiver.recv()
                except (EOFError, OSError):  # gone, or killed in the middle of a message
                    process.join(STOP_WAIT_S)
                    raise AdmissionProcessError(
                        f"the admission process ended abruptly (exit code {process.exitcode}: killed, or out of "
                        f"memory) while reading {self.task.pool}; build again, or with --admit-workers 1") from None
                if isinstance(message, Failed):
                    raise _error_of(message)
                done = isinstance(message, AdmissionDone)
                yield message
        finally:
            self._stop(ended=done)

    def close(self) -> None:
        """End the process if its messages were not all read (a no-op once ``messages()`` ended)."""
        if self.process is not None:
            self._stop(ended=False)

    def _let_go(self) -> None:
        go, self._go = self._go, None
        if go is None:
            return
        try:
            go.send(True)
        except (BrokenPipeError, OSError):
            pass  # the process is gone: its messages' pipe says how
        finally:
            go.close()

    def _stop(self, ended: bool) -> None:
        process, receiver, go = self.process, self._receiver, self._go
        self._receiver = self._go = None
        if go is not None:
            go.close()  # never let go: it ends before it opens an image
        if receiver is not None:
            receiver.close()
        if not ended and process.is_alive():
            process.terminate()  # SystemExit there: its partial files are removed
        process.join(STOP_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()


def _error_of(message: Failed) -> BaseException:
    return error_of(message, lambda text: AdmissionProcessError(f"the admission failed in its process: {text}"))


# --- the admission process -------------------------------------------------------------------


def run_admission(connection, task: AdmitTask, parent: int, go=None) -> None:
    """The admission process's body (``AdmissionProcess``); ``go``: the pipe whose message lets it
    open the pool's images (None: at once)."""
    start_worker(parent)  # Ctrl-C is the build's; it ends once the build's process is gone
    signal.signal(signal.SIGTERM, exit_on_term)
    gc.freeze()  # the modules' objects: not traversed by each collection the admission starts (``heap.py``)
    sender = QueuedSender(connection, QUEUED_MESSAGES, "admission-sender")
    run_sending(sender, lambda: _admit_and_send(task, sender, go), connection)


def _admit_and_send(task: AdmitTask, sender: QueuedSender, go=None) -> None:
    t0 = time.perf_counter()
    waited = 0.0  # for ``go``: not admitting

    def wait_for_go() -> None:
        nonlocal waited
        if go is None:
            return
        t1 = time.perf_counter()
        try:
            go.recv()
        except (EOFError, OSError):  # the build closed it unsent: it stopped before its generate stage
            exiting()  # the SIGTERM that follows must not cut the partial files' removal short
            raise SystemExit(0) from None
        finally:
            go.close()
            waited = time.perf_counter() - t1
    clean_report: dict = {}
    dropped: Counter = Counter()
    rows: list = []
    size, lines, admitted = FIRST_MESSAGE_ROWS, 0, 0
    last = time.perf_counter()

    def send() -> None:
        nonlocal rows, lines, last
        sender.put(AdmittedRows(rows, lines, dict(dropped)))
        rows, lines, last = [], 0, time.perf_counter()

    with closing(admit_records(task, clean_report, dropped, wait_for_go)) as records:  # closed at once on SystemExit
        for row in records:
            lines += 1
            if row is not None:
                rows.append(row)
                admitted += 1
                if len(rows) >= size:
                    send()
                    size = min(size * 2, MESSAGE_ROWS)
                    continue
            if lines >= MESSAGE_LINES or (lines % 64 == 0 and time.perf_counter() - last >= MESSAGE_SECONDS):
                send()
    if rows or lines:
        send()
    sender.put(AdmissionDone(clean_report, dict(dropped), admitted, time.perf_counter() - t0 - sender.waited - waited))
