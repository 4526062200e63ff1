"""What an import did: how many source records were read, how many pool lines were written, and
every problem, each naming where it is in the source (file:line, label file, dataset row) and why.

A report keeps the first ``PROBLEMS_KEPT`` problems in memory for messages and counts all of
them; the writer appends every problem to a sidecar JSONL file, so none is lost however large
the source is.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Optional

# Problems held in memory (for messages); the sidecar file holds all of them.
PROBLEMS_KEPT = 1000
# Problems listed by format_import_report before "... and N more".
PROBLEMS_SHOWN = 20


@dataclass(frozen=True)
class ImportProblem:
    """One source record (or turn, or file) that did not become a pool line."""

    where: str  # "train.json:12", "label/7.txt", "data.parquet[train]:3"
    reason: str  # machine-readable, e.g. "unanswered_turn"
    detail: str  # what is wrong and, where useful, what to do
    id: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ImportReport:
    """Counts and problems of one import; ``read`` counts source records, ``written`` pool lines."""

    format: str
    source: str
    out: str
    read: int = 0
    written: int = 0
    images_written: int = 0  # image files the importer wrote itself (hf); 0 for the others
    paths_outside: int = 0  # image locators written as paths outside the pool file's folder, unsealed
    sealed: Optional[str] = None  # the seal (pool.seal) that lets a build read the others
    problem_counts: Counter = field(default_factory=Counter)
    problems: list[ImportProblem] = field(default_factory=list)
    problems_path: Optional[str] = None  # sidecar JSONL with every problem, when there are any
    _sink: Optional[IO[str]] = field(default=None, repr=False, compare=False)

    @property
    def problems_total(self) -> int:
        return sum(self.problem_counts.values())

    def add_problem(self, problem: ImportProblem) -> None:
        """Count ``problem``, keep it if fewer than PROBLEMS_KEPT are kept, and append it to the sidecar."""
        self.problem_counts[problem.reason] += 1
        if len(self.problems) < PROBLEMS_KEPT:
            self.problems.append(problem)
        if self._sink is None and self.problems_path is not None:
            self._sink = open(self.problems_path, "w", encoding="utf-8")
        if self._sink is not None:
            self._sink.write(json.dumps(problem.to_dict(), ensure_ascii=False) + "\n")

    def close(self) -> None:
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        if self.problems_path is not None and not self.problem_counts:
            self.problems_path = None  # nothing went wrong: no sidecar

    def to_dict(self) -> dict:
        return {
            "format": self.format,
            "source": self.source,
            "out": self.out,
            "read": self.read,
            "written": self.written,
            "images_written": self.images_written,
            "paths_outside": self.paths_outside,
            "sealed": self.sealed,
            "problems": self.problems_total,
            "problems_by_reason": dict(sorted(self.problem_counts.items())),
            "problems_path": self.problems_path,
        }


def problems_path_for(out: Path) -> Path:
    """Where the sidecar with every import problem goes: ``pool.jsonl`` -> ``pool.problems.jsonl``."""
    return out.with_name(out.stem + ".problems.jsonl")


def format_import_report(report: ImportReport) -> str:
    """A few lines for a terminal: totals, problems by reason, the first problems with file:line."""
    lines = [
        f"imported {report.format} {report.source} -> {report.out}: "
        f"{report.read} source records read, {report.written} pool lines written, "
        f"{report.problems_total} problems"
    ]
    if report.images_written:
        lines.append(f"  {report.images_written} image files written (original bytes)")
    if report.sealed:
        lines.append(f"  sealed: {report.sealed} lets a build on this machine read the images where the import "
                     f"found them, outside the pool file's folder")
    if report.paths_outside:
        lines.append(f"  {report.paths_outside} image paths lie outside the pool file's folder: build this pool "
                     f"with --allow-outside-paths (a build reads only images inside the pool's folder otherwise)")
    if report.problem_counts:
        by_reason = ", ".join(f"{reason} {n}" for reason, n in sorted(report.problem_counts.items()))
        lines.append(f"  problems by reason: {by_reason}")
        for problem in report.problems[:PROBLEMS_SHOWN]:
            ident = f" [{problem.id}]" if problem.id else ""
            lines.append(f"  {problem.where}{ident}: {problem.reason}: {problem.detail}")
        more = report.problems_total - min(len(report.problems), PROBLEMS_SHOWN)
        if more > 0:
            lines.append(f"  ... and {more} more")
        if report.problems_path:
            lines.append(f"  every problem: {report.problems_path}")
    return "\n".join(lines)
