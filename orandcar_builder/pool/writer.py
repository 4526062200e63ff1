"""Writing the native pool format: the one place importers turn a record into a pool line.

Every line goes through ``parse_pool_line`` before it is written, so whatever an importer writes
reads back with ``read_pool`` (image files aside, which the cleaning stage checks). The pool is
written to ``<out>.partial`` and renamed over ``out`` only when the import finishes, so an
interrupted import never leaves a truncated pool behind.

The writer keeps no per-line state, so an import's memory does not grow with its source; ids
repeated in a source are therefore not caught here but by ``read_pool``, which drops every line
after the first with that id as ``duplicate_id``.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from ..files import replaced_on_success
from .jsonl import PoolLineError, encode_pool_line, parse_pool_line
from .report import ImportProblem, ImportReport, problems_path_for


class PoolWriter:
    """A context manager that writes checked pool lines to ``out`` and records problems in ``report``."""

    def __init__(self, out: Path, report: ImportReport):
        self.out = Path(out)
        self.base = os.path.abspath(self.out.parent)
        self.report = report
        self._fh = None
        self._stack = ExitStack()

    def __enter__(self) -> "PoolWriter":
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.report.problems_path = str(problems_path_for(self.out))
        with ExitStack() as stack:
            # Undone in reverse on exit: the file closes, the report closes, then the partial file
            # is renamed over ``out`` (or removed if the import failed).
            partial = stack.enter_context(replaced_on_success(self.out))
            stack.callback(self.report.close)
            self._fh = stack.enter_context(open(partial, "w", encoding="utf-8", newline="\n"))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stack.__exit__(exc_type, exc, tb)

    def relative(self, path: str | os.PathLike) -> str:
        """``path`` as the pool records it: relative to the pool file's directory, with '/'."""
        # abspath, not resolve(): no syscall per line, and a symlinked image keeps its own name
        relative = Path(os.path.relpath(os.path.abspath(path), self.base)).as_posix()
        if relative == ".." or relative.startswith("../"):
            self.report.paths_outside += 1  # a build admits these only with --allow-outside-paths
        return relative

    def problem(self, where: str, reason: str, detail: str, id: Optional[str] = None) -> None:
        self.report.add_problem(ImportProblem(where, reason, detail, id))

    def write(self, line: dict, where: str) -> bool:
        """Check ``line`` (native pool fields) and write it; a bad line becomes a problem instead."""
        item_id = line.get("id") if isinstance(line.get("id"), str) else None
        try:
            fields = parse_pool_line(line)
        except PoolLineError as exc:
            self.problem(where, exc.reason, exc.detail, item_id)
            return False
        self._fh.write(encode_pool_line(fields) + "\n")
        self.report.written += 1
        return True

    def check_image(self, path: Path, where: str, item_id: Optional[str] = None) -> bool:
        """True when ``path`` is a regular file; otherwise records ``image_missing`` and returns False."""
        if path.is_file():
            return True
        self.problem(where, "image_missing", f"image file {str(path)!r} not found", item_id)
        return False
