"""The review page's costly part, prepared in a process of its own while the build ends.

At the end of a large build the page reads every decision once and draws three charts
(``page.decisions_part``: some 1.5-2.5 s at 200k QA, matplotlib's import included), on one core,
after the card and validate have run on that same core. The decisions are final once the write
stage has begun, so ``PageAhead.start`` hands that part to a fresh interpreter (``python -c``, as
``pipeline.writeproc`` does) when the figures are known, and the card and validate run beside it;
the page then takes the child's answer (``take``) and does the rest here (the thumbnails, the
other work-dir files, the template).

The answer is used only when it was made from the very file the page reads (``files.file_stat``:
its size, times, inode and device) for the same samples (the calibration's disagreements, the samples per
kind); in every other case (the child failed, was killed, answered something else, or was never
started) the page makes the part itself with the same function, so the page's bytes cannot depend
on where its part was made. The child writes no file of the build's: stopping it needs no clean-up.
A child that fails says why on its stderr (a temporary file), which the build shows in one
warning line before the page is made in the build's process.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

from ..childproc import child_env, program
from ..figures import BuildFigures
from ..files import ABSENT, file_stat
from ..parquetio import open_parquet
from ..pool.prefetch import usable_cpus
from ..workdir import WorkDir
from .collect import SAMPLES_PER_KIND, calibration_of, wanted_ids

# Decisions from which the part is prepared apart, on two cores or more: below, the child's start
# (the interpreter, pyarrow, matplotlib: about 1 s of CPU) costs more than the part itself.
AHEAD_MIN_DECISIONS = 50_000
# The child's program (``childproc.program``).
_CHILD = program(__name__)
# The last characters of a failed child's error shown in the build's warning.
ERROR_SHOWN_CHARS = 300


class PageAhead:
    """The page's part of the decisions, prepared by a child process; a context manager that
    stops a child still running when the build leaves it (an error, Ctrl-C)."""

    def __init__(self, min_decisions: Optional[int] = None):
        self.min_decisions = AHEAD_MIN_DECISIONS if min_decisions is None else min_decisions
        self._child: Optional[subprocess.Popen] = None
        self._task: Optional[tuple] = None
        self._errors = None  # the child's stderr: a temporary file

    def __enter__(self) -> "PageAhead":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop()

    @property
    def started(self) -> bool:
        return self._child is not None

    def start(self, work: Path, figures: BuildFigures, per_kind: int = SAMPLES_PER_KIND) -> bool:
        """Start the child for the build of work dir ``work`` (its decisions final, ``figures``
        the build's); False, and nothing started, where the page is better made in this process
        (one core, a small build) or cannot be made at all (the page says why when it is made).
        Never raises: the child only saves time, so nothing here may stop a build."""
        self.stop()
        try:
            return self._start(WorkDir(work), figures, per_kind)
        except Exception:  # an unreadable calibration.json, a file gone, no process to start, ...
            self.stop()
            return False

    def _start(self, work: WorkDir, figures: BuildFigures, per_kind: int) -> bool:
        if usable_cpus() < 2 or open_parquet(work.decisions).metadata.num_rows < self.min_decisions:
            return False
        calibration, _ = calibration_of(figures, work)
        wanted = wanted_ids(calibration)
        identity = file_stat(work.decisions)
        if identity is None or identity == ABSENT:
            return False
        errors = tempfile.TemporaryFile()  # the child's error, for the warning when it fails
        try:
            child = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=errors, env=child_env())
        except BaseException:
            errors.close()
            raise
        self._child, self._task, self._errors = child, (identity, wanted, per_kind), errors
        task = {"decisions": str(work.decisions), "wanted": sorted(wanted), "per_kind": per_kind}
        child.stdin.write((json.dumps(task) + "\n").encode("utf-8"))
        child.stdin.close()
        return True

    def take(self, decisions: Path, wanted: frozenset, per_kind: int):
        """The child's ``page.DecisionsPart`` when it was made from ``decisions`` as it is now for
        ``wanted`` and ``per_kind``; else None (the caller makes the part itself). Waits for the
        child; one that failed is reported on stderr in one line (the page is made all the same)."""
        child, task, errors = self._child, self._task, self._errors
        if child is None:
            return None
        try:
            if task != (file_stat(decisions), wanted, per_kind):
                return None  # an answer for another file or other samples: not waited for
            data = child.stdout.read()
            code = child.wait()
            if code != 0:
                errors.seek(0)
                text = errors.read().decode("utf-8", "replace").strip()
                if text:  # nothing when it was interrupted (Ctrl-C) or killed
                    last = text.splitlines()[-1][-ERROR_SHOWN_CHARS:]
                    sys.stderr.write(f"warning: the review page's second process failed (exit code {code}: "
                                     f"{last}); the page is made in the build's process\n")
                return None
        finally:
            self.stop()  # interrupted while waiting, or not waited for: the child ends too
        from .page import DecisionsPart

        try:
            part = pickle.loads(data)
        except Exception:
            return None
        return part if isinstance(part, DecisionsPart) else None

    def stop(self) -> None:
        """End a child still running and forget it."""
        child, errors = self._child, self._errors
        self._child = self._task = self._errors = None
        if errors is not None:
            errors.close()
        if child is None:
            return
        if child.poll() is None:
            child.kill()
        child.wait()
        for stream in (child.stdin, child.stdout):
            if stream is not None:
                stream.close()


def main() -> int:
    """The child: one JSON task on stdin, the pickled ``DecisionsPart`` on stdout; an error
    ends it with code 1, no answer and its traceback on stderr (the page then makes the part
    itself, and says why if it cannot); Ctrl-C ends it quietly."""
    answer = sys.stdout.buffer
    sys.stdout = sys.stderr  # a library's print cannot reach the answer
    try:
        from .page import decisions_part

        task = json.loads(sys.stdin.readline())
        part = decisions_part(Path(task["decisions"]), frozenset(task["wanted"]), int(task["per_kind"]))
        answer.write(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
        answer.flush()
    except (KeyboardInterrupt, BrokenPipeError):  # the build was interrupted, or stopped listening
        return 1
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1
    return 0
