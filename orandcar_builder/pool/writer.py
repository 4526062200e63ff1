"""Writing the native pool format: the one place importers turn a record into a pool line.

Every line goes through ``parse_pool_line`` before it is written, so whatever an importer writes
reads back with ``read_pool`` (image files aside, which the cleaning stage checks). The pool is
written to ``<out>.partial`` and renamed over ``out`` only when the import finishes, so an
interrupted import never leaves a truncated pool behind. Each importer names the folders it
reads images from (``add_root``); a finished import seals the pool with them (``seal``), so a
build admits those images without ``--allow-outside-paths``.

The writer keeps no per-line state, so an import's memory does not grow with its source; ids
repeated in a source are therefore not caught here but by ``read_pool``, which drops every line
after the first with that id as ``duplicate_id``.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from ..files import replaced_on_success, within
from .jsonl import PoolLineError, encode_pool_line, parse_pool_line
from .report import ImportProblem, ImportReport, problems_path_for
from .seal import write_seal


class PoolWriter:
    """A context manager that writes checked pool lines to ``out`` and records problems in ``report``."""

    def __init__(self, out: Path, report: ImportReport):
        self.out = Path(out)
        self.base = os.path.abspath(self.out.parent)
        self.report = report
        self.roots: list[str] = []  # folders this import reads images from (``add_root``)
        self._sealed = 0  # image paths outside the pool's folder but inside a root: the seal admits them
        self._fh = None
        self._digest = hashlib.sha256()
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
        if exc_type is None:  # a failed import left the old pool, and so its seal, as they were
            seal = write_seal(self.out, self.roots if self._sealed else (), self._digest.hexdigest())
            if seal is not None:
                self.report.sealed = str(seal)
            else:  # no key could be had: these need --allow-outside-paths after all
                self.report.paths_outside += self._sealed

    def add_root(self, folder: str | os.PathLike) -> None:
        """Let the pool's lines name images inside ``folder`` (where this import found them)."""
        self.roots.append(os.path.realpath(folder))

    def relative(self, path: str | os.PathLike) -> str:
        """``path`` as the pool records it: relative to the pool file's directory, with '/'."""
        # abspath, not resolve(): no syscall per line, and a symlinked image keeps its own name
        relative = Path(os.path.relpath(os.path.abspath(path), self.base)).as_posix()
        if relative == ".." or relative.startswith("../"):
            if any(within(path, root) for root in self.roots):
                self._sealed += 1  # the seal lets a build admit it
            else:
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
        text = encode_pool_line(fields) + "\n"
        self._fh.write(text)
        self._digest.update(text.encode("utf-8"))  # the file's bytes: UTF-8, "\n" as written
        self.report.written += 1
        return True

    def check_image(self, path: Path, where: str, item_id: Optional[str] = None) -> bool:
        """True when ``path`` is a regular file; otherwise records ``image_missing`` and returns False."""
        if path.is_file():
            return True
        self.problem(where, "image_missing", f"image file {str(path)!r} not found", item_id)
        return False
