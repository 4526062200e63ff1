"""admit: pool file -> work/admitted.parquet (one row per admitted item, ADMITTED_SCHEMA, in pool
order) and work/dropped.jsonl (each dropped line with its reason).

``Admission`` is the stage as a stream, so that on the local executor the generate stage can
consume the rows as they are admitted (the first requests go out after a few items); the
``AdmitStage`` runs it whole when admission does not overlap generation.

A rerun whose admission inputs are those of the work dir's last admission (the pool file, the
files its lines name, the settings and cleaning code: ``pipeline.reuse``) takes its files and
figures as they are: ``Admission.start()`` says so, and the generate stage then reads
work/admitted.parquet.

While it overlaps generation, a large pool's admission runs on a process of its own
(``admitproc``), so that admitting and generating + deciding use two cores; its records and
files are those of an admission here, and a small pool (under PROCESS_MIN_POOL_BYTES) is
admitted here, where its first rows come at once."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Iterator, Optional

from ...childproc import can_spawn
from ...families import Families
from ...images import ImagePolicy
from .. import reuse
from ..admitproc import AdmissionProcess, AdmitTask, AdmittedRows, admit_records
from ..progress import count_lines, stage_bar
from ..work import AdmitResult, BuildContext, StageStats

# A pool file this large or larger is admitted on a process of its own when admission overlaps
# generation with two or more admission processes (``Admission.on_process``): below it, starting
# the process (about half a second before its first rows) costs more than the overlap gives.
PROCESS_MIN_POOL_BYTES = 1 << 20


class Admission:
    """``rows()`` yields each admitted item's row (ADMITTED_SCHEMA) as soon as it is admitted, in
    pool order, while writing work/admitted.parquet and work/dropped.jsonl; both are complete
    (renamed into place) once the rows are exhausted, and removed if the stream is closed early or
    fails. The admission uses ``workers`` processes: with one, all of it runs here; with more,
    here ``workers`` processes check the image files (``pool.prefetch``), or on a process of its
    own (``process``; None: ``on_process`` decides) it checks them there and on ``workers - 1``
    more from three on. The records are those of one process. ``seconds`` is the time spent
    admitting (not the time the consumer spent between rows). With ``progress``, the ``admit``
    bar counts the pool's lines out of their number (``lines``)."""

    def __init__(self, pool: Path, work: Path, limit: Optional[int], clean_report: dict,
                 images: Optional[ImagePolicy] = None, workers: int = 1, progress: bool = False,
                 families: Optional[Families] = None, process: Optional[bool] = None):
        self.pool, self.work, self.limit, self.clean_report = pool, work, limit, clean_report
        self.families = families  # the build's registry: a recipe's families are admitted too
        self.images, self.workers, self.progress, self.process = images, workers, progress, process
        self.dropped: Counter = Counter()
        self.admitted = 0
        self.done = False
        self.seconds = 0.0
        self.reused = False  # the work dir's last admission was taken as it is (``start``)
        self._inputs: Optional[reuse.Inputs] = None
        self._lines: Optional[int] = None
        self._process: Optional[AdmissionProcess] = None  # started by ``prepare``

    @property
    def lines(self) -> int:
        """The pool lines this admission reads (``--limit`` applied), counted on first use."""
        if self._lines is None:
            self._lines = count_lines(self.pool, self.limit)
        return self._lines

    def expected(self) -> Optional[int]:
        """The items admitted once admission ends, as far as known now: exact when it is done;
        before, the lines less those dropped so far (None without progress bars: not counted)."""
        if self.done:
            return self.admitted
        return self.lines - sum(self.dropped.values()) if self.progress else None

    def start(self) -> bool:
        """Take the work dir's last admission as it is when its inputs are unchanged
        (``reuse.reusable``): True then, and the admission is done. Checked once."""
        if self._inputs is None:
            t0 = time.perf_counter()
            self._inputs = reuse.Inputs(self.pool, self.limit, self.images, self.families)
            figures = reuse.reusable(self.work, self._inputs)
            if figures is not None:
                self.clean_report.clear()
                self.clean_report.update(figures["cleaning"])
                self.dropped = Counter(figures["dropped"])
                self.admitted = figures["admitted"]
                self.reused = self.done = True
            self.seconds += time.perf_counter() - t0
        return self.reused

    def prepare(self) -> None:
        """Before the build makes its engine: when the admission will stream from a process of
        its own (``on_process``) and nothing is reused, start that process now, so that its start
        and the pool's first pass (ids, purity: no image opened) overlap the engine's making (a
        replay file read, a model loaded); ``rows()`` then lets it open the images. ``close()``
        ends it if the build stops before."""
        if self._process is None and not self.start() and self.on_process():
            self._process = AdmissionProcess(self.task(on_process=True))
            self._process.start()

    def close(self) -> None:
        """End the process ``prepare`` started, if its rows were not all read."""
        process, self._process = self._process, None
        if process is not None:
            process.close()

    def stream(self) -> Optional[Iterator[dict]]:
        """``rows()`` while admitting; None when the last admission is reused (``start``): its rows
        are then read from work/admitted.parquet."""
        return None if self.start() else self.rows()

    def run(self) -> None:
        """The whole admission (or its reuse)."""
        if not self.start():
            # Nothing runs beside it: a process of its own only when told to.
            for _ in self.rows(on_process=self.process is True):
                pass

    def rows(self, on_process: Optional[bool] = None) -> Iterator[dict]:
        """Admit the pool (``stream`` and ``run`` call it only when ``start`` found nothing to reuse):
        on a process of its own when ``on_process`` (None: ``self.on_process()``) says so, else here."""
        reuse.forget(self.work)  # the files it describes are about to be replaced
        if on_process if on_process is not None else self.on_process():
            yield from self._rows_from_process()
        else:
            self.close()  # a process ``prepare`` started is not the one that admits
            yield from self._rows_here()

    def on_process(self) -> bool:
        """Whether the admission runs on a process of its own (``admitproc``): as ``process`` says,
        or when not told, with two or more admission processes, a pool file of
        PROCESS_MIN_POOL_BYTES or more, and a main program a spawned process can start from
        (``admitproc.can_spawn``)."""
        if self.process is not None:
            return self.process
        try:
            size = self.pool.stat().st_size
        except OSError:
            return False  # the read names the problem
        return self.workers >= 2 and size >= PROCESS_MIN_POOL_BYTES and can_spawn()

    def task(self, *, on_process: bool) -> AdmitTask:
        # On a process of its own the admission checks images there (one process of the
        # ``workers``) and on ``workers - 1`` more; here it uses ``workers`` image checkers.
        image_workers = self.workers if not on_process else (self.workers - 1 if self.workers >= 3 else 1)
        return AdmitTask(self.pool, self.work, self.limit, self.images, image_workers, self.families, self._inputs)

    def _rows_here(self) -> Iterator[dict]:
        t0 = time.perf_counter()
        with stage_bar("admit", self.lines if self.progress else None, self.progress) as bar:
            for row in admit_records(self.task(on_process=False), self.clean_report, self.dropped):
                bar.update(1)
                if row is not None:
                    self.admitted += 1
                    self.seconds += time.perf_counter() - t0
                    yield row
                    t0 = time.perf_counter()
        self.seconds += time.perf_counter() - t0
        self.done = True

    def _rows_from_process(self) -> Iterator[dict]:
        with stage_bar("admit", self.lines if self.progress else None, self.progress) as bar:
            process = self._process or AdmissionProcess(self.task(on_process=True))
            for message in process.messages():
                if isinstance(message, AdmittedRows):
                    bar.update(message.lines)
                    self.dropped = Counter(message.dropped)
                    for row in message.rows:
                        self.admitted += 1
                        yield row
                else:  # the last message: the admission is complete, its files in place
                    self.clean_report.clear()
                    self.clean_report.update(message.clean_report)
                    self.dropped = Counter(message.dropped)
                    self.seconds += message.seconds
                    if message.admitted != self.admitted:
                        raise RuntimeError(f"the admission process admitted {message.admitted} items but sent "
                                           f"{self.admitted}")  # a bug, never bad input
        self.done = True

    def counters(self) -> dict:
        counters = {"admitted": self.admitted, "dropped": sum(self.dropped.values())}
        if self.reused:
            counters["reused"] = True
        return counters


class AdmitStage:
    """The whole admission at once: work/admitted.parquet and work/dropped.jsonl complete before
    the generate stage starts (``overlap_admit=False``, or an executor that does not stream the admission)."""

    name = "admit"

    def run(self, context: BuildContext, admission: Admission) -> AdmitResult:
        admission.run()
        return AdmitResult.of(admission, StageStats(self.name, {"admit": admission.seconds}, admission.counters()))
