"""admit: pool file -> work/admitted.parquet (one row per admitted item, ADMITTED_SCHEMA, in pool
order) and work/dropped.jsonl (each dropped line with its reason).

``Admission`` is the stage as a stream, so that on the local executor the generate stage can
consume the rows as they are admitted (the first requests go out after a few items); the
``AdmitStage`` runs it whole when admission does not overlap generation.

A rerun whose admission inputs are those of the work dir's last admission (the pool file, the
files its lines name, the settings and cleaning code: ``pipeline.reuse``) takes its files and
figures as they are: ``Admission.start()`` says so, and the generate stage then reads
work/admitted.parquet."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Iterator, Optional

from ...clean.pool_file import clean_lines
from ...families import Families
from ...files import JsonLinesFile
from ...images import ImagePolicy
from ...records import ADMITTED_SCHEMA, Dropped, admitted_row
from ...workdir import WorkDir
from .. import reuse
from ..progress import count_lines, stage_bar
from ..work import AdmitResult, BuildContext, StageStats
from ..workfiles import ParquetFile, WorkFiles


class Admission:
    """``rows()`` yields each admitted item's row (ADMITTED_SCHEMA) as soon as it is admitted, in
    pool order, while writing work/admitted.parquet and work/dropped.jsonl; both are complete
    (renamed into place) once the rows are exhausted, and removed if the stream is closed early or
    fails. ``workers`` processes check the image files (``pool.prefetch``); the records are those
    of one process. ``seconds`` is the time spent admitting (not the time the consumer spent
    between rows). With ``progress``, the ``admit`` bar counts the pool's lines out of their number
(``lines``)."""

    def __init__(self, pool: Path, work: Path, limit: Optional[int], clean_report: dict,
                 images: Optional[ImagePolicy] = None, workers: int = 1, progress: bool = False,
                 families: Optional[Families] = None):
        self.pool, self.work, self.limit, self.clean_report = pool, work, limit, clean_report
        self.families = families  # the build's registry: a recipe's families are admitted too
        self.images, self.workers, self.progress = images, workers, progress
        self.dropped: Counter = Counter()
        self.admitted = 0
        self.done = False
        self.seconds = 0.0
        self.reused = False  # the work dir's last admission was taken as it is (``start``)
        self._inputs: Optional[reuse.Inputs] = None
        self._lines: Optional[int] = None

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

    def stream(self) -> Optional[Iterator[dict]]:
        """``rows()`` while admitting; None when the last admission is reused (``start``): its rows
        are then read from work/admitted.parquet."""
        return None if self.start() else self.rows()

    def run(self) -> None:
        """The whole admission (or its reuse)."""
        if not self.start():
            for _ in self.rows():
                pass

    def rows(self) -> Iterator[dict]:
        """Admit the pool (``stream`` and ``run`` call it only when ``start`` found nothing to reuse)."""
        t0 = time.perf_counter()
        reuse.forget(self.work)  # the files it describes are about to be replaced
        inputs = self._inputs
        with stage_bar("admit", self.lines if self.progress else None, self.progress) as bar, \
                WorkFiles(admitted=ParquetFile(WorkDir(self.work).admitted, ADMITTED_SCHEMA),
                          dropped=JsonLinesFile(WorkDir(self.work).dropped),
                          images=ParquetFile(WorkDir(self.work).admission_images, reuse.IMAGES_SCHEMA)) as files:
            named = reuse.NamedFiles(files.images, inputs.start_ns)
            for record in clean_lines(self.pool, self.clean_report, limit=self.limit, spill_dir=self.work,
                                      images=self.images, workers=self.workers, named=named,
                                      families=self.families):
                bar.update(1)
                if isinstance(record, Dropped):
                    files.dropped.write(record.to_dict())
                    self.dropped[record.reason] += 1
                else:
                    row = admitted_row(record)
                    files.admitted.add(row)
                    self.admitted += 1
                    self.seconds += time.perf_counter() - t0
                    yield row
                    t0 = time.perf_counter()
        if not named.racy:
            reuse.record(self.work, inputs, {"admitted": self.admitted, "dropped": dict(self.dropped),
                                             "cleaning": self.clean_report})
        self.seconds += time.perf_counter() - t0
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
