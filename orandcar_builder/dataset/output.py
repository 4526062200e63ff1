"""Where a build writes: the output folder, written beside the old one and swapped in when valid,
and the lock that keeps two builds off one work dir.

- ``check_paths`` runs before any work: ``-o`` must be a new or empty folder, or an earlier build
  of this tool (it carries the ``layout.MARKER`` file and nothing outside the dataset layout);
  ``--work`` must not be a file nor lie inside ``-o``; neither may be a symbolic link that the
  build would write through.
- ``StagedOutput`` writes into a hidden sibling ``.<name>.orandcar-new`` and, on ``publish()``,
  moves the old folder aside (``.<name>.orandcar-old``), moves the new one in, and removes the old
  one. A build that fails at any point (disk full, a read-only folder, an interrupted run) leaves
  the previous folder as it was; a swap interrupted between its two renames is completed or
  undone by the next build.
- ``WorkLock`` holds an exclusive ``flock`` on ``<work>/.lock`` for the whole build; a second
  build on the same work dir stops at once with a message naming the holder's pid.
- ``OutputLock`` does the same for ``-o``: a lock file beside it (``.<name>.orandcar-lock``, where
  the staged and old copies go too), so two builds into one folder with different work dirs do
  not share (and delete) one staged folder; the second stops at once, naming the first's pid and
  work dir. The lock file is removed when the build ends.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from pathlib import Path
from typing import Optional

from ..errors import OrandCarError
from ..files import within
from ..workdir import WorkDir
from .layout import MARKER, scan, write_marker

STAGE_SUFFIX = ".orandcar-new"
OLD_SUFFIX = ".orandcar-old"
OUT_LOCK_SUFFIX = ".orandcar-lock"


class OutputError(OrandCarError):
    """An output folder or work dir the build must not (or cannot) write to."""


def _listing(paths: list[str], limit: int = 10) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def stage_path(out: Path) -> Path:
    return out.with_name(f".{out.name}{STAGE_SUFFIX}")


def old_path(out: Path) -> Path:
    return out.with_name(f".{out.name}{OLD_SUFFIX}")


def out_lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}{OUT_LOCK_SUFFIX}")


def check_work(work: Path, out: Optional[Path] = None) -> None:
    """``work`` can hold a build's state: not a file, not a link to elsewhere, not inside ``out``."""
    if work.is_symlink() and not work.is_dir():
        raise OutputError(f"{work}: the work dir is a broken symbolic link")
    if work.exists() and not work.is_dir():
        raise OutputError(f"{work}: the work dir is a file, not a folder; choose a folder with --work")
    if out is not None and within(work, os.path.realpath(out)):
        raise OutputError(f"{work}: the work dir lies inside the dataset folder {out}; its cache and manifest "
                          f"would be replaced by a rebuild (and pushed with it): choose a --work outside {out}")


def check_out(out: Path) -> None:
    """``out`` is new, empty, or an earlier build of this tool holding only the dataset layout."""
    if out.is_symlink():
        raise OutputError(f"{out}: the dataset folder is a symbolic link; a build never writes through links, "
                          f"give the folder itself (-o {os.path.realpath(out)})")
    if out.exists() and not out.is_dir():
        raise OutputError(f"{out}: is a file, not a folder; choose a new or empty folder with -o")
    if not out.exists():
        return
    layout = scan(out)
    if layout.empty:
        return
    if not layout.marker:
        raise OutputError(
            f"{out}: the folder is not empty and is not an earlier OrandCar build (it has no {MARKER} file); "
            f"the build replaces its -o folder as a whole, so choose a new or empty folder "
            f"(it holds {_listing(layout.published + layout.unexpected)})")
    if layout.unexpected:
        raise OutputError(
            f"{out}: this earlier build now holds file(s) the build did not write: {_listing(layout.unexpected)}; "
            f"a rebuild replaces the folder as a whole, so move them out first")


def check_paths(out: Path, work: Path) -> None:
    """Every refusal that does not need the build's results, before any work is done."""
    check_out(out)
    check_work(work, out)


class WorkLock:
    """An exclusive lock on the work dir for the length of a build (``with WorkLock(work):``)."""

    def __init__(self, work: Path):
        self.work = Path(work)
        self.fd: Optional[int] = None

    def __enter__(self) -> "WorkLock":
        path = WorkDir(self.work).lock
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(self.fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(self.fd)
            self.fd = None
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                raise OutputError(f"{self.work}: the work dir is in use by another build (pid {holder}); wait for "
                                  f"it to finish, or give this build its own --work") from None
            raise
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = None


class OutputLock:
    """An exclusive lock on the dataset folder ``out`` for the length of a build (``with
    OutputLock(out, work):``), held on a file beside it that is removed when the build ends.
    ``work`` is named to a second build that finds the lock taken."""

    def __init__(self, out: Path, work: Optional[Path] = None):
        self.out = Path(out)
        self.path = out_lock_path(self.out)
        self.work = work
        self.fd: Optional[int] = None

    def __enter__(self) -> "OutputLock":
        self.out.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "unknown"
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
                    raise OutputError(f"{self.out}: another build is writing this dataset folder ({holder}); "
                                      f"wait for it to finish, or give this build another -o") from None
                raise
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if same:  # not a file the previous holder removed after this one opened it
                break
            os.close(fd)
        self.fd = fd
        work = f", work dir {os.path.abspath(self.work)}" if self.work is not None else ""
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}{work}\n".encode("utf-8"), 0)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.path)  # while still held: a build that opened it meanwhile sees it gone
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None


def _remove_ours(path: Path, what: str) -> None:
    """Remove a stage or an old copy left by an earlier build: only when it is a real folder of ours."""
    if not os.path.lexists(path):
        return
    layout = None if path.is_symlink() or not path.is_dir() else scan(path)
    if layout is None or not (layout.marker or layout.empty):
        raise OutputError(f"{path}: the build keeps its {what} here, but this is not a folder it wrote; "
                          f"move it away and build again")
    shutil.rmtree(path)


def recover(out: Path) -> None:
    """Finish or undo a swap an earlier build was interrupted in (between its two renames)."""
    old = old_path(out)
    if not os.path.lexists(old):
        return
    if not os.path.lexists(out) and old.is_dir() and not old.is_symlink() and scan(old).marker:
        os.rename(old, out)  # the old folder was moved aside and the new one never arrived
    else:
        _remove_ours(old, "previous dataset while swapping")


class StagedOutput:
    """The folder a build writes into: a sibling of ``out``, swapped in by ``publish()``.

    Leaving the ``with`` block without ``publish()`` after an error removes the stage; after a
    clean exit without ``publish()`` (the dataset failed validation) the stage is kept for
    inspection and ``out`` is untouched."""

    def __init__(self, out: Path, work: Optional[Path] = None):
        self.out, self.work = Path(out), work  # the marker remembers ``work``
        self.path = stage_path(self.out)
        self.published = False

    def __enter__(self) -> "StagedOutput":
        recover(self.out)
        _remove_ours(self.path, "new dataset while it is written")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.path.mkdir()
        write_marker(self.path, self.work)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and not self.published and os.path.isdir(self.path):
            shutil.rmtree(self.path, ignore_errors=True)

    def publish(self) -> None:
        """Swap the finished folder in for ``out``; the old one is removed only after that."""
        check_out(self.out)  # nothing foreign may have appeared there while the build ran
        old = old_path(self.out)
        had_old = self.out.exists() and any(os.scandir(self.out))
        if had_old:
            os.rename(self.out, old)
        elif self.out.exists():
            self.out.rmdir()  # empty: nothing to keep
        try:
            os.rename(self.path, self.out)
        except OSError:
            if had_old:
                os.rename(old, self.out)
            raise
        self.published = True
        if had_old:
            shutil.rmtree(old, ignore_errors=True)  # what cannot go now, the next build's recover() removes
