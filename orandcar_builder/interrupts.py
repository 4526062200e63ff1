"""Ctrl-C: the command's own process stops with one line and exit 130; worker processes stay quiet.

A terminal sends SIGINT to every process of the foreground group, the workers a command started
too. Only the command's own process acts on it (it unwinds, each ``with`` block stopping what it
started, and the CLI prints ``INTERRUPTED_MESSAGE`` and exits ``INTERRUPTED_EXIT``); a worker that
took it as well would die with a KeyboardInterrupt traceback of its own, wherever it was. So
workers are started with SIGINT blocked (``sigint_blocked`` around whatever starts them: a blocked
signal stays blocked across fork and exec, so even a worker still starting up never sees it) and
ignore it once running (``ignore_sigint``, for a pool's initializer). They end when their pool is
shut down, or when the command's process is gone (``images.exit_with_parent``).

Imports nothing from the package.
"""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl-C
INTERRUPTED_MESSAGE = "interrupted"


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """Block SIGINT in the calling thread for the block (processes and threads started inside
    inherit the block); a Ctrl-C meanwhile is delivered when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def unblock_sigint() -> None:
    """In a process started inside ``sigint_blocked`` that takes Ctrl-C once it is ready: let
    SIGINT in from now on; a Ctrl-C that came meanwhile is raised here (KeyboardInterrupt)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def interrupted_by(exc: BaseException) -> bool:
    """Whether a KeyboardInterrupt is among the causes of ``exc`` (a library that was interrupted
    may raise an error of its own instead)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def raise_if_interrupted(exc: BaseException) -> None:
    """Where an error is recorded and the work goes on (one failed request, one failed decision):
    an error that is really a Ctrl-C stops the command instead."""
    if interrupted_by(exc):
        raise KeyboardInterrupt from exc


def ignore_sigint() -> None:
    """In a worker process: SIGINT is the command's to handle, not the worker's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
