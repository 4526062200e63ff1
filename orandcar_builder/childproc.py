"""What the build's spawned helper processes share (the admission, ``pipeline.admitproc``; the
decider, ``executors.decider``): whether a process can be spawned at all, a sender that writes
messages to a pipe from a thread of its own, and how an error crosses the pipe.

- ``can_spawn``: spawn re-runs the main module, so a program read from standard input cannot
  start a child.
- ``QueuedSender``: a child keeps working while its messages go out, at most ``limit`` ahead of
  what the build's process has read; once the build's process stops reading (the pipe is closed),
  ``put`` raises SystemExit, so the child leaves through its ``with`` blocks.
- ``Failed`` / ``failed`` / ``error_of``: an exception is sent pickled where the build's process
  can rebuild it (so the build stops with the message it would have given in its own process),
  else as text with its traceback.
- ``program`` / ``child_env``: a fresh interpreter (``python -c``, for the write stage's second
  process and the review page's) that runs this package's code and no other: the current folder,
  which ``-c`` puts first on ``sys.path``, is taken off it (a folder holding another checkout, or a
  ``json.py``, would be imported instead), and the package's root is put on ``PYTHONPATH`` unless
  it is a site folder, which the interpreter reads anyway, after the standard library.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


def program(module: str) -> str:
    """The ``python -c`` text that runs ``module``'s ``main()`` and exits with its code, the
    current folder taken off ``sys.path`` (an empty entry; ``-m`` would not do: the package imports
    such a module before it could run as ``__main__``)."""
    return f"import sys; sys.path[:] = [p for p in sys.path if p]; from {module} import main; sys.exit(main())"


def child_env() -> dict[str, str]:
    """The environment of a ``program`` child: this one's, with the package's root on PYTHONPATH
    where a fresh interpreter would not find the package (a source checkout; an installed package
    lives in a site folder, which stays after the standard library)."""
    import site

    env = dict(os.environ)
    try:
        site_folders = {os.path.realpath(p) for p in (*site.getsitepackages(), site.getusersitepackages())}
    except AttributeError:  # a virtualenv's old site.py
        site_folders = set()
    if os.path.realpath(_PACKAGE_ROOT) not in site_folders:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    return env


def can_spawn() -> bool:
    """Whether a spawned process can start from this one: spawn re-runs the main module from its
    file, so a main program read from standard input (``python - <<EOF``, whose ``__file__`` is
    ``<stdin>``) leaves the process nothing to run and it dies at once."""
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:
        return True  # python -m: spawn imports the module by name
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)  # None: an interactive session or a notebook


@dataclass(frozen=True)
class Failed:
    """An error of a child process, as sent to the build's process."""

    error: bytes  # the pickled exception ("" when it would not come back as it is)
    text: str  # its type, message and traceback, where it cannot be unpickled


def failed(exc: BaseException) -> Failed:
    """``exc`` (being handled) as a Failed message."""
    try:
        error = pickle.dumps(exc)
        pickle.loads(error)  # sent as it is only if the build's process can rebuild it
    except Exception:
        error = b""
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip() + "\n" + traceback.format_exc()
    return Failed(error, text)


def error_of(message: Failed, otherwise: Callable[[str], BaseException]) -> BaseException:
    """The exception a Failed message carries, or ``otherwise(text)`` when it cannot be rebuilt."""
    try:
        error = pickle.loads(message.error)
    except Exception:
        error = None
    if isinstance(error, BaseException):
        return error
    return otherwise(message.text)


def exit_on_term(signum, frame) -> None:
    """A child's SIGTERM handler: SystemExit, so that its ``with`` blocks remove partial files."""
    exiting()
    raise SystemExit(0)


def exiting() -> None:
    """A child that has begun to leave (SystemExit on its way) ignores SIGTERM from now on: a
    second SystemExit raised inside its ``with`` blocks' cleanup would skip the rest of it and
    leave partial files (the build's process kills a child that does not end in time)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


class QueuedSender:
    """Messages written to ``connection`` by a thread of their own, at most ``limit`` queued."""

    def __init__(self, connection, limit: int, name: str):
        self.connection = connection
        self.queue: queue.Queue = queue.Queue(limit)
        self.error: Optional[BaseException] = None
        self.waited = 0.0  # seconds ``put`` waited for room in the queue
        self.thread = threading.Thread(target=self._send, name=name, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        while True:
            message = self.queue.get()
            if message is None:
                return
            try:
                self.connection.send(message)
            except BaseException as exc:  # the build's process closed the pipe, or is gone
                self.error = exc
                return

    def put(self, message) -> None:
        t0 = time.perf_counter()
        while True:
            if self.error is not None:
                raise SystemExit(0)  # the build's process stopped listening: stop, removing the files
            try:
                self.queue.put(message, timeout=0.5)
                break
            except queue.Full:
                continue
        self.waited += time.perf_counter() - t0

    def close(self) -> None:
        """Send what is queued, then stop the thread (at once if the pipe is gone)."""
        try:
            self.put(None)
        except SystemExit:
            return
        self.thread.join()


def run_sending(sender: QueuedSender, body: Callable[[], None], *connections) -> None:
    """A child's body: ``body()``; an error it raises goes to the build's process as a Failed
    message (SystemExit, the build's process gone or SIGTERM, ends it quietly); then the queued
    messages go out and ``connections`` are closed."""
    try:
        body()
    except SystemExit:
        pass
    except BaseException as exc:
        try:
            sender.put(failed(exc))
        except SystemExit:
            pass  # nobody listens any more
    finally:
        sender.close()
        for connection in connections:
            connection.close()
