"""admit: pool file -> work/admitted.parquet (one row per admitted item, ADMITTED_SCHEMA, in pool
order) and work/dropped.jsonl (each dropped line with its reason).

``Admission`` is the stage as a stream, so that on the local executor the generate stage can
consume the rows as they are admitted (the first requests go out after a few items); the
``AdmitStage`` runs it whole when admission does not overlap generation."""

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

    def rows(self) -> Iterator[dict]:
        t0 = time.perf_counter()
        with stage_bar("admit", self.lines if self.progress else None, self.progress) as bar, \
                WorkFiles(admitted=ParquetFile(WorkDir(self.work).admitted, ADMITTED_SCHEMA),
                          dropped=JsonLinesFile(WorkDir(self.work).dropped)) as files:
            for record in clean_lines(self.pool, self.clean_report, limit=self.limit, spill_dir=self.work,
                                      images=self.images, workers=self.workers, families=self.families):
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
        self.seconds += time.perf_counter() - t0
        self.done = True

    def counters(self) -> dict:
        return {"admitted": self.admitted, "dropped": sum(self.dropped.values())}


class AdmitStage:
    """The whole admission at once: work/admitted.parquet and work/dropped.jsonl complete before
    the generate stage starts (the ray executor, or ``overlap_admit=False``)."""

    name = "admit"

    def run(self, context: BuildContext, admission: Admission) -> AdmitResult:
        for _ in admission.rows():
            pass
        return AdmitResult.of(admission, StageStats(self.name, {"admit": admission.seconds}, admission.counters()))
