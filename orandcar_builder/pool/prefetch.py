"""Admission's image checks on several processes, in pool order.

Reading a pool (``jsonl.read_pool``) is sequential where order matters (the ids already used,
the remembered image checks) and costly where it does not: each image file is read, fully
decoded and hashed (``images.check_image``, about 10 ms for a real photograph). ``ImagePrefetch``
runs that pure part ahead of the reader on a pool of worker processes: it reads the pool's lines
a few chunks ahead, sends the image paths of each chunk that the reader has not checked recently
to a worker, and hands the lines on in their order once their chunk's checks are back. The reader
then asks ``result(path)`` instead of checking the file itself; a path it was not sent (or no
longer holds) is checked in the reader's process, so the answers, and so the admitted items and
drops, are exactly those of one process. A check sent for a line that then turns out to be
dropped for another reason (a repeated id) is only wasted work.

Memory stays bounded: at most ``depth`` chunks of lines and their checks (a path, a hash and a
size each) are held. Workers are started with ``spawn`` (a build may already run threads, which
``fork`` does not copy safely), import only ``images``, leave Ctrl-C to the build's process
(``interrupts``) and end when that process is gone, even if it was killed outright.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from itertools import islice
from typing import Callable, Iterable, Iterator, Optional

from ..errors import OrandCarError
from ..images import ImageError, ImagePolicy, ImageRef, check_image, check_images, start_worker
from ..interrupts import sigint_blocked

# Lines of the first task sent to a worker; each next task has twice as many, up to CHUNK_GROWTH
# times this: the first checks come back soon, and then a task's overhead (pickling it, the
# pipe writes of the build's process) stays small against its images' checks.
CHUNK_LINES = 16
CHUNK_GROWTH = 16
# Tasks queued per worker ahead of the reader.
TASKS_PER_WORKER = 4
# Lines the reader checks itself before any worker starts (``jsonl.read_pool``).
INLINE_FIRST = 64
# Default admission processes (``default_workers``).
MAX_DEFAULT_WORKERS = 8


class AdmitWorkerError(OrandCarError):
    """A worker process died (it was killed, or ran out of memory): its checks are lost."""


def usable_cpus() -> int:
    """The CPUs this process may use (its affinity where the system tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_workers() -> int:
    """min(the CPUs this process may use, 8)."""
    return min(usable_cpus(), MAX_DEFAULT_WORKERS)


def check_workers(workers: object) -> int:
    """``workers`` as a whole number of processes, 1 or more; ValueError otherwise."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"admit workers must be a whole number of processes, 1 or more, not {workers!r}")
    return workers


def image_path_of(line: object, path_of: Callable[[str], str]) -> Optional[str]:
    """The absolute image path a pool line names, as ``read_pool`` forms it (``path_of``, the
    reader's recorded -> absolute path function): ``line`` is a parsed line
    (``jsonl.parsed_lines``: a tuple ``(where, id, image, ...)``), or a Dropped, which names none
    (it is dropped before any image check)."""
    return path_of(line[2]) if type(line) is tuple else None


class ImagePrefetch:
    """Image checks of the lines ahead, on ``workers`` processes (see the module docstring).

    ``known(path)`` says whether the reader still remembers a path's check (it is then not sent).
    Use as a context manager; the workers are stopped on exit.
    """

    def __init__(self, workers: int, base: str, root: str, policy: ImagePolicy,
                 known: Callable[[str], bool], *, path_of: Callable[[str], str], chunk: Optional[int] = None,
                 depth: Optional[int] = None):
        self.workers = check_workers(workers)
        self.base, self.root, self.policy, self.known, self.path_of = base, root, policy, known, path_of
        self.chunk = chunk or CHUNK_LINES
        self.max_chunk = self.chunk if chunk else self.chunk * CHUNK_GROWTH
        self.depth = depth or TASKS_PER_WORKER * self.workers
        self.ready: dict[str, ImageRef | ImageError] = {}
        self.pending: dict[str, int] = {}  # path sent -> the last chunk that names it
        self._pool: Optional[ProcessPoolExecutor] = None
        self._next = 0

    def __enter__(self) -> "ImagePrefetch":
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=start_worker, initargs=(os.getpid(),))
        return self

    def __exit__(self, *exc_info) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def result(self, path: str) -> ImageRef | ImageError:
        """The check of ``path``: the workers' answer, or one made here."""
        found = self.ready.get(path)
        if found is not None:
            return found
        return check_image(path, self.root, self.policy)

    def lines(self, lines: Iterable[tuple]) -> Iterator[tuple]:
        """``lines`` (parsed lines, ``jsonl.parsed_lines``) in their order, each once the checks of
        its chunk are back."""
        source = iter(lines)
        window: deque[tuple[int, list, Optional[Future], list[str], list[str]]] = deque()

        def submit() -> bool:
            chunk = list(islice(source, self.chunk))
            if not chunk:
                return False
            self.chunk = min(self.chunk * 2, self.max_chunk)
            index, self._next = self._next, self._next + 1
            named: list[str] = []
            send: list[str] = []
            for line in chunk:
                path = image_path_of(line, self.path_of)
                if path is None:
                    continue
                if path in self.pending:
                    self.pending[path] = index
                    named.append(path)
                elif not self.known(path):
                    self.pending[path] = index
                    named.append(path)
                    send.append(path)
            future = None
            if send:
                with sigint_blocked():  # a worker this starts never sees the terminal's Ctrl-C
                    future = self._pool.submit(check_images, send, self.root, self.policy)
            window.append((index, chunk, future, send, named))
            return True

        while len(window) < self.depth and submit():
            pass
        while window:
            index, chunk, future, send, named = window.popleft()
            if future is not None:
                try:
                    checked = future.result()
                except BrokenProcessPool as exc:
                    raise AdmitWorkerError(
                        f"an admission worker process ended abruptly (killed, or out of memory) while checking "
                        f"images such as {send[0]}: {exc}; build again, or with --admit-workers 1") from None
                self.ready.update(zip(send, checked))
            yield from chunk
            # The reader is past this chunk: a path no later chunk names is remembered by the
            # reader now (or was not needed), so its answer is let go.
            for path in named:
                if self.pending.get(path) == index:
                    del self.pending[path]
                    self.ready.pop(path, None)
            submit()
